// deferred_unmap/detail/step_engine.hpp - one timed step at a time, and the one loop every caller runs.
//
// The step lock is held while steps run (by a drain, a flush, a push over the cap, or the unmapping
// worker); it guards the items in flight and the learned model. A drain never waits for it longer than
// its own budget. Lock order: step lock, then the worker's, then the backlog's, never the reverse (the
// worker books a close under its own lock; a fork takes all three in this order).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>

#include "../cost_model.hpp"
#include "../os.hpp"
#include "../reclaim_options.hpp"
#include "../stats.hpp"
#include "backlog.hpp"
#include "thread_annotations.hpp"

namespace deferred_unmap::detail {

/// Calls the host's error callback; a throw from it is swallowed (teardown paths never throw).
inline void report_error(const std::function<void(const reclaim_error&)>& on_error, const reclaim_error& error) noexcept {
    if (!on_error) return;
#if DEFERRED_UNMAP_HAS_EXCEPTIONS
    try {
        on_error(error);
    } catch (...) {
        // Already counted in the stats; the queue goes on.
    }
#else
    on_error(error);
#endif
}

/// Closes `fd` once. Returns the number of errors (0 or 1), reported through `on_error`.
template <class Os>
unsigned close_once(int fd, const std::function<void(const reclaim_error&)>& on_error) noexcept {
    const int error = Os::close(fd);
    if (error == 0) return 0;
    report_error(on_error, {reclaim_error::operation::close, error, nullptr, 0, fd, false});
    return 1;
}

template <class Clock>
std::chrono::nanoseconds elapsed(typename Clock::time_point from, typename Clock::time_point to) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from);
}

/// `from + d`, or time_point::max() where that would overflow.
template <class Clock>
typename Clock::time_point saturating_add(typename Clock::time_point from, std::chrono::nanoseconds d) noexcept {
    using time_point = typename Clock::time_point;
    using duration = typename Clock::duration;
    if (d <= std::chrono::nanoseconds::zero()) return from;
    const auto room = time_point::max() - from;
    if (std::chrono::duration_cast<std::chrono::nanoseconds>(room) <= d) return time_point::max();
    return from + std::chrono::duration_cast<duration>(d);
}

/// Where a run of steps stops.
template <class Clock>
struct step_limits {
    typename Clock::time_point deadline = Clock::time_point::max();  ///< no step predicted to end later starts
    bool first_step_free = false;  ///< drain(budget): the first step runs whatever its prediction
    bool hand_off = false;         ///< closes go to the worker (close_on_worker)
    bool until_under_cap = false;  ///< a push over max_pending_bytes or max_pending_items: stop once under both
    std::chrono::nanoseconds unmap_pause{0};  ///< sleep between two munmap steps (drain_pause)
    step_site site = step_site::drain;
};

/// Whole pages of munmap predicted to take at most `max_step` at `rate` ns per byte after
/// `call_overhead`, at least one `page`; saturates at the largest page multiple of size_t for a zero
/// rate. Pure, O(1).
inline std::size_t step_bytes(std::chrono::nanoseconds call_overhead, double rate, std::chrono::nanoseconds max_step,
                              std::size_t page) noexcept {
    const double room = static_cast<double>((max_step - call_overhead).count());
    constexpr auto largest = std::numeric_limits<std::size_t>::max();
    if (room <= 0.0) return page;
    // Compared in double so a tiny rate cannot overflow the conversion back to size_t.
    const double fits = rate > 0.0 ? room / rate : static_cast<double>(largest);
    // Half the range: any size_t that large already covers every mapping, and the cast stays exact.
    constexpr double half_range = static_cast<double>(largest) / 2.0;
    if (fits >= half_range) return largest / page * page;
    const auto pages = static_cast<std::size_t>(fits) / page;
    return std::max(pages, std::size_t{1}) * page;
}

/// The next of the fewest steps of at most `fit` bytes that cover `left`, cut alike: whole pages,
/// within one page of the others for as long as `fit` stays the same. A cut that leaves a sliver
/// makes one short call that costs mostly its entry and a TLB flush; one of 64 KiB or more also
/// teaches the model a rate inflated by them. `left` and `fit` are page multiples (a `fit` under a
/// page counts as one; a `left` under a page goes whole). Pure, O(1).
inline std::size_t even_step_bytes(std::size_t left, std::size_t fit, std::size_t page) noexcept {
    if (fit >= left || left < page) return left;
    const auto ceil_div = [](std::size_t a, std::size_t b) { return a / b + (a % b != 0 ? 1 : 0); };
    const std::size_t left_pages = left / page;
    const std::size_t steps = ceil_div(left_pages, std::max(fit / page, std::size_t{1}));
    return ceil_div(left_pages, steps) * page;
}

template <class Clock, class Os>
class step_engine {
public:
    using time_point = typename Clock::time_point;
    /// Takes a close off this thread; false when it cannot (then the close is made here).
    using hand_off_fn = std::function<bool(int fd, std::size_t bytes)>;

    step_engine(backlog<Clock>& books, const reclaim_options& options, std::size_t chunk_bytes) noexcept
        : books_(books), options_(options), chunk_bytes_(chunk_bytes), model_(options.prior), expected_pause_(options.drain_pause) {}

    /// Runs steps under `limits`, waiting for the step lock at most until limits.deadline. Returns
    /// false, having run nothing, when another thread held the lock all that time.
    bool try_run(const step_limits<Clock>& limits, drain_report& report, const hand_off_fn& hand_off) DU_EXCLUDES(mutex_) {
        if (limits.deadline == time_point::max()) {
            run_blocking(limits, report, hand_off);
            return true;
        }
        if (!mutex_.try_lock_for(elapsed<Clock>(Clock::now(), limits.deadline))) return false;
        lock_guard lock(mutex_, std::adopt_lock);
        run(limits, report, hand_off);
        return true;
    }

    /// Runs steps under `limits`, waiting as long as it takes for the step lock.
    void run_blocking(const step_limits<Clock>& limits, drain_report& report, const hand_off_fn& hand_off) DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        run(limits, report, hand_off);
    }

    /// One step, as a run would make it next (the unmapping worker). False when nothing was left.
    bool step_once() DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        aside_due_ = has_aside_;  // always false: the unmapping worker's queue never sets one aside
        if (!load_current()) return false;
        drain_report scratch;
        cpu_mark_ = cpu_now();
        timed_step(Clock::now(), scratch, step_site::worker);
        return true;
    }

    /// Tears down `it` at once, on this thread: for a push that found no room, after the rest went.
    void tear_down_now(const reclaim_item& it) DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        step_outcome unmapped;
        if (it.addr != nullptr) unmap(it.addr, it.length, it.length, unmapped);
        const unsigned close_errors = it.fd >= 0 ? close_once<Os>(it.fd, options_.on_error) : 0;
        books_.record_immediate(it.length, unmapped, it.fd >= 0, close_errors);
    }

    // ---- fork(): see fork_guard.hpp. Taken first, as every run takes it before the books' lock.
    void lock_for_fork() DU_ACQUIRE(mutex_) { mutex_.lock(); }
    void unlock_after_fork() DU_RELEASE(mutex_) { mutex_.unlock(); }
    void renew_after_fork() noexcept { mutex_.renew_after_fork(); }

private:
    // The one loop: drain, drain_until, flush and the cap all come here.
    void run(const step_limits<Clock>& limits, drain_report& report, const hand_off_fn& hand_off) DU_REQUIRES(mutex_) {
        time_point now = Clock::now();
        cpu_mark_ = cpu_now();
        aside_due_ = has_aside_;
        bool after_unmap = false;  // survives hand-offs: they take no mmap_lock
        while (load_current()) {
            if (limits.until_under_cap && !books_.over_cap(options_.max_pending_bytes, options_.max_pending_items)) break;
            if (waits_behind_aside()) break;
            if (limits.hand_off && !unmapping() && hand_off && hand_off(target().fd, target().close_bytes)) {
                ++report.fds_handed_off;
                books_.retire();
                let_go();
                now = Clock::now();  // so the hand-off is not timed as part of the next step
                cpu_mark_ = cpu_now();
                if (now >= limits.deadline) break;  // bare fds pushed without end still stop
                continue;
            }
            if (!unmapping()) size_close();
            const bool forced = limits.first_step_free && report.steps == 0;
            const bool pausing = after_unmap && unmapping() && limits.unmap_pause > std::chrono::nanoseconds::zero();
            const std::chrono::nanoseconds room = pausing ? expected_pause_ : std::chrono::nanoseconds{0};
            if (!forced && saturating_add<Clock>(saturating_add<Clock>(now, room), predict_next()) > limits.deadline) {
                if (set_aside() || pass_over_aside()) continue;
                if (pausing && saturating_add<Clock>(now, predict_next()) <= limits.deadline) doubt_pause(limits.unmap_pause);
                break;
            }
            if (pausing && !paused(limits.unmap_pause, now, limits.deadline)) break;
            after_unmap = unmapping();
            now = timed_step(now, report, limits.site);
        }
    }

    // Sleeps `pause` so a thread waiting for mmap_lock gets it between two steps, and learns how long
    // such a sleep really takes; false when it ran so long that the next step no longer fits.
    bool paused(std::chrono::nanoseconds pause, time_point& now, time_point deadline) DU_REQUIRES(mutex_) {
        if constexpr (has_pause<Os>) {  // only reached with a pause to take, hence an Os that can
            const time_point before = now;
            Os::pause(pause);
            now = Clock::now();
            cpu_mark_ = cpu_now();
            learn_pause(pause, elapsed<Clock>(before, now));
        }
        return saturating_add<Clock>(now, predict_next()) <= deadline;
    }

    // The expected sleep alone kept a step out: an eighth of the way back to what is asked. Only
    // sleeps taken teach the estimate, so one raised by a spell of late wake-ups would otherwise keep
    // every later drain to a single munmap step.
    void doubt_pause(std::chrono::nanoseconds asked) DU_REQUIRES(mutex_) { expected_pause_ -= (expected_pause_ - asked) / 8; }

    // A quarter of the way to what the sleep took, at most twice the current estimate (one long
    // wake-up must not stop the pauses), never below what was asked (a signal cut it short).
    void learn_pause(std::chrono::nanoseconds asked, std::chrono::nanoseconds took) DU_REQUIRES(mutex_) {
        constexpr auto longest = std::chrono::nanoseconds::max();
        const std::chrono::nanoseconds seen = std::min(took, expected_pause_ > longest / 2 ? longest : 2 * expected_pause_);
        expected_pause_ = std::max(asked, expected_pause_ + (seen - expected_pause_) / 4);
    }

    // Makes sure an item is in flight: the close set aside, else the oldest unfinished item; false when
    // there is none.
    bool load_current() DU_REQUIRES(mutex_) {
        if (aside_due_ || in_flight_) return true;
        in_flight_ = books_.pop(current_);
        item_rate_ = -1.0;
        return in_flight_;
    }

    // A descriptor pushed with no size gets one from the Os before its close is predicted, so a close
    // that frees 256 MiB is not taken for a free call; where the Os cannot tell, it stays unknown and
    // predict_next() says it fits no deadline.
    void size_close() DU_REQUIRES(mutex_) {
        reclaim_item& it = target();
        if (it.close_bytes_known) return;
        if constexpr (has_allocated_bytes<Os>) {
            const std::int64_t bytes = Os::allocated_bytes(it.fd);
            if (bytes < 0) return;
            it.close_bytes = static_cast<std::size_t>(bytes);
            it.close_bytes_known = true;
        }
    }

    // The item whose step is next: a close set aside in an earlier run goes before anything of a newer
    // item, so closes stay in push order.
    [[nodiscard]] reclaim_item& target() DU_REQUIRES(mutex_) { return aside_due_ ? aside_ : current_; }
    [[nodiscard]] const reclaim_item& target() const DU_REQUIRES(mutex_) { return aside_due_ ? aside_ : current_; }

    // The target needs no more steps here.
    void let_go() DU_REQUIRES(mutex_) {
        if (aside_due_) has_aside_ = aside_due_ = false;
        else in_flight_ = false;
    }

    // The next step is a close that does not fit: it waits to go first in the next run while this one
    // goes on to the next item's munmap, so a frame's budget is not left empty behind one long close.
    // One at most: a newer item's close waits behind it. False when one waits.
    bool set_aside() DU_REQUIRES(mutex_) {
        if (has_aside_ || unmapping()) return false;
        aside_ = current_;
        has_aside_ = true;
        in_flight_ = false;
        return true;
    }

    // The close set aside does not fit this run either (drain_until's first step is not free): it
    // keeps waiting while the run goes on with the current item's munmap.
    bool pass_over_aside() DU_REQUIRES(mutex_) {
        if (!aside_due_) return false;
        aside_due_ = false;
        return true;
    }

    // The current item is down to its close while an older close set aside still waits.
    [[nodiscard]] bool waits_behind_aside() const DU_REQUIRES(mutex_) { return has_aside_ && !aside_due_ && !unmapping(); }

    [[nodiscard]] bool unmapping() const DU_REQUIRES(mutex_) { return target().unmapped < target().length; }

    // The next munmap's length: min(unmap_chunk_bytes, what is left of the current item) where the
    // model predicts that fits in max_step at its slow rate (max_step_deviations); otherwise what is
    // left cut evenly into the fewest steps the model predicts fit, each at least a page (a step must
    // make progress however slow the model says the machine is).
    [[nodiscard]] std::size_t next_chunk() const DU_REQUIRES(mutex_) {
        const std::size_t left = target().length - target().unmapped;
        const std::size_t upper = std::min(chunk_bytes_, left);
        const std::size_t fit = fitting_step();
        return fit >= upper ? upper : even_step_bytes(left, fit, page_size());
    }

    // Pools differ: one the compositor read has page tables to zap, one it never read has none, so a
    // rate learned from other pools says little about this one. A pool's first step is sized at the
    // cautious rate, the slower of first_step_ns_per_byte and the learned slow rate, so however many
    // cheap pools came before (in this queue or in a prior carried over), it holds mmap_lock about
    // max_step at most. Its own rate, from that step, sizes the
    // rest, up to twice the cautious step: a pool read only in part keeps every step under ~2x max_step.
    [[nodiscard]] std::size_t fitting_step() const DU_REQUIRES(mutex_) {
        const std::size_t probe = step_bytes(model_.call_overhead, cautious_rate(), options_.max_step, page_size());
        if (item_rate_ < 0.0) return probe;
        const double own = item_rate_ + options_.max_step_deviations * model_.unmap_deviation_ns_per_byte;
        const std::size_t grown = probe > std::numeric_limits<std::size_t>::max() / max_growth ? probe : probe * max_growth;
        return std::min(step_bytes(model_.call_overhead, own, options_.max_step, page_size()), grown);
    }

    [[nodiscard]] double cautious_rate() const DU_REQUIRES(mutex_) {
        return std::max(options_.first_step_ns_per_byte, model_.unmap_ns_per_byte_high(options_.max_step_deviations));
    }

    // A pool's first munmap is predicted at the rate it was sized at: the learned mean may come from
    // cheaper pools, and drain_until must not start a step it cannot afford. An unknown close (see
    // size_close) is predicted at a day: no deadline fits it.
    [[nodiscard]] std::chrono::nanoseconds predict_next() const DU_REQUIRES(mutex_) {
        if (!unmapping()) {
            const reclaim_item& it = target();
            return it.close_bytes_known ? model_.predict_close(it.close_bytes) : std::chrono::hours{24};
        }
        return predict_unmap_at(item_rate_ < 0.0 ? cautious_rate() : item_rate_);
    }

    // The next munmap at `rate` ns a byte, with the model's call overhead.
    [[nodiscard]] std::chrono::nanoseconds predict_unmap_at(double rate) const DU_REQUIRES(mutex_) {
        cost_model at = model_;
        at.unmap_ns_per_byte = rate;
        return at.predict_unmap(next_chunk());
    }

    // Runs the current item's next step, learns from its time and books it; returns the time after.
    time_point timed_step(time_point before, drain_report& report, step_site site) DU_REQUIRES(mutex_) {
        reclaim_item& it = target();
        step_outcome step;
        step.site = site;
        const std::chrono::nanoseconds cpu_before = cpu_mark_;
        const bool unmap_step = unmapping();
        const std::size_t bytes = unmap_step ? next_chunk() : it.close_bytes;
        // The stats hold the model to its own prediction (the item's rate, else the mean), not to the
        // cautious one a first step starts on: they say how well the model knows the machine.
        const std::chrono::nanoseconds predicted =
            unmap_step ? predict_unmap_at(item_rate_ < 0.0 ? model_.unmap_ns_per_byte : item_rate_) : std::chrono::nanoseconds{-1};
        if (unmap_step) {
            unmap(it.addr + it.unmapped, bytes, it.length - it.unmapped, step);
            it.unmapped += step.advanced;
        } else {
            step.closed = true;
            step.close_errors = close_once<Os>(it.fd, options_.on_error);
        }
        const time_point after = Clock::now();
        step.took = elapsed<Clock>(before, after);
        // Budgets are kept in wall time (step.took), but the model learns from the thread's CPU time
        // where the Os offers it: a step whose thread was preempted took long on the wall clock, not
        // in the kernel, and must not make the next drains timid. CPU time never exceeds wall time
        // for one thread, so the min only guards against a clock that could not be read.
        std::chrono::nanoseconds learned = step.took;
        const std::chrono::nanoseconds cpu_after = cpu_now();
        cpu_mark_ = cpu_after;  // the next step of this run starts here, as `after` is its wall start
        if (cpu_before.count() >= 0 && cpu_after.count() >= 0) learned = std::min(learned, cpu_after - cpu_before);
        const bool clean = step.unmap_errors == 0 && step.close_errors == 0;
        // A failed chunk's fallback unmapped more than was predicted: a fault, not a sizing miss.
        if (clean && unmap_step) step.unmap_prediction = {predicted, learned, learned > options_.max_step};
        if (clean && unmap_step) learn_unmap(bytes, learned);
        if (clean && !unmap_step && it.close_bytes_known) model_.learn_close(bytes, learned);
        step.item_done = !unmapping() && (it.fd < 0 || !unmap_step);
        if (step.item_done) let_go();
        ++report.steps;
        report.bytes_unmapped += step.freed;
        report.fds_closed += step.closed ? 1 : 0;
        report.errors += step.unmap_errors + step.close_errors;
        books_.record_step(step, model_, after);
        return after;
    }

    // The model learns as before; the item keeps its own step's rate whole, for its next steps.
    void learn_unmap(std::size_t bytes, std::chrono::nanoseconds took) DU_REQUIRES(mutex_) {
        model_.learn_unmap(bytes, took);
        if (const double rate = model_.observed_rate(bytes, took); rate >= 0.0) item_rate_ = rate;
    }

    // The calling thread's CPU time, or -1 ns when the Os has no such clock (or could not read it).
    static std::chrono::nanoseconds cpu_now() noexcept {
        if constexpr (has_thread_cpu_time<Os>) return Os::thread_cpu_time();
        else return std::chrono::nanoseconds{-1};
    }

    // One munmap of `bytes` at `at`; on failure, one munmap of the whole `rest`, so nothing is lost to
    // a split VMA. Fills the unmap fields of `step`.
    void unmap(std::byte* at, std::size_t bytes, std::size_t rest, step_outcome& step) noexcept {
        step.advanced = step.freed = bytes;
        const int error = Os::unmap(at, bytes);
        if (error == 0) return;
        ++step.unmap_errors;
        step.advanced = rest;
        step.freed = rest;
        const int retry = rest > bytes ? Os::unmap(at, rest) : error;
        step.fallback = rest > bytes;
        report_error(options_.on_error, {reclaim_error::operation::unmap, error, at, bytes, -1, retry == 0});
        if (retry == 0) return;
        if (rest > bytes) {
            ++step.unmap_errors;
            report_error(options_.on_error, {reclaim_error::operation::unmap, retry, at, rest, -1, false});
        }
        step.leaked = rest;
        step.freed = 0;
    }

    backlog<Clock>& books_;
    const reclaim_options& options_;
    const std::size_t chunk_bytes_;

    timed_mutex mutex_;
    reclaim_item current_ DU_GUARDED_BY(mutex_){};
    bool in_flight_ DU_GUARDED_BY(mutex_) = false;
    reclaim_item aside_ DU_GUARDED_BY(mutex_){};  // an unmapped item whose close did not fit its run
    bool has_aside_ DU_GUARDED_BY(mutex_) = false;
    bool aside_due_ DU_GUARDED_BY(mutex_) = false;  // the aside close is this run's next step
    cost_model model_ DU_GUARDED_BY(mutex_);
    /// What the current item's own last munmap step cost per byte; -1 before it has one (see fitting_step).
    double item_rate_ DU_GUARDED_BY(mutex_) = -1.0;
    /// How far a pool's own rate may grow its steps past the cautious first one.
    static constexpr std::size_t max_growth = 2;
    /// The thread CPU clock where the next step starts: read once per step, since on Linux each read
    /// is a system call (~0.6 us on a VM), like `now` for the wall clock.
    std::chrono::nanoseconds cpu_mark_ DU_GUARDED_BY(mutex_){-1};
    /// What one drain_pause sleep is expected to take, learned: the timer slack and wake-up on top.
    std::chrono::nanoseconds expected_pause_ DU_GUARDED_BY(mutex_);
};

}  // namespace deferred_unmap::detail

// deferred_unmap/reclaim_queue.hpp - dead shm pools, torn down a budgeted slice per frame.
//
// Guarantees: every pushed item is torn down exactly once, mapping before descriptor, munmaps oldest
// first and closes oldest first, and no close before the munmap of anything pushed earlier (so a pool
// pushed as a mapping, then its descriptor, is unmapped first), even when the queue cannot grow (then
// everything older goes first, the closes with close_on_worker on the worker, then it on the pushing
// thread). One exception to the closes' order: with close_on_worker, a close that a drain cannot hand
// to the worker because the worker's ring cannot grow is made at once by the drain, and may pass
// older closes the worker still holds (never a munmap). A close that does not fit what is left of a
// drain waits to go first in the next one while this drain unmaps the next item, so a long close does
// not leave a budget unused. Work is
// cut into steps (one munmap predicted to hold mmap_lock at most max_step, or one close) whose cost a
// model learned online predicts. Without drain_pause the steps of one drain run back to back, so
// another thread's mmap may wait for the whole drain, not one step. drain(budget) starts a step only
// if it fits what is left of the budget, except the first, so every call makes progress and
// overshoots by at most one step (with drain_pause, or by how much one sleep outlasts what the queue
// has learned its sleeps take); drain_until(deadline) never starts a step predicted to end after
// the deadline (with drain_pause it may still end late by such a sleep).
// Neither waits longer than its budget for steps another thread is running: it returns with
// report.busy set. Errors never throw and never lose an item: they are counted and passed to on_error.
//
//   deferred_unmap::reclaim_queue queue;                                      // closes on a worker
//   void on_pool_destroyed(pool& p) { queue.push(std::move(p.region)); }      // O(1), no syscall
//   void on_frame_committed() { queue.drain(std::chrono::milliseconds{1}); }  // ~1 ms of munmap
//   void on_idle_timer() { queue.drain(std::chrono::milliseconds{1}); }       // next_deadline() (*)
//   void on_worker_done() { queue.clear_worker_done(); }                      // worker_done_fd() readable
//   // ~reclaim_queue() flushes whatever is left.
//   // (*) after an idle drain: the earlier of next_deadline() and a frame period on, a frame's pace.
//
// Modes: by default (close_on_worker) drain makes the munmap calls and a worker thread the close()
// calls, which free the pages without mmap_lock. unmap_on_worker gives the worker every call; with
// neither, the draining thread makes them all and no thread is started. The worker starts with every
// asynchronous signal blocked, runs SCHED_OTHER whatever its creator's policy, and is named
// du-reclaim. Where it cannot be started (no thread, no pipe), the queue tears down inline and
// stats().worker_error says why. Nothing here throws for it, with or without exceptions.
//
// fork(): the forking thread first takes every queue's locks, so it waits for a step another thread
// is running, and until the fork returns, push, stats and next_deadline on other threads wait for it
// (fork from the frame thread, or spawn with posix_spawn, which takes none). The child's queue has no
// worker and tears down inline; the closes the worker still held are made by the child's next
// hand-off, flush or wait for the worker, except one it had begun. Never fork from on_error, nor from
// anything on_error waits for.
//
// Idle and worker: pending_items() and empty() count everything not yet torn down, the worker's share
// included. next_deadline() is when a drain is due, time_point::max() when nothing waits for one, even
// if the worker still holds work. So `!empty() && next_deadline() == max()` means "the worker has the
// rest": wait for worker_done_fd() to become readable (or call wait_for_worker), clear it, look again.
//
// Threads: push, pending_bytes, pending_items, empty, next_deadline, stats, model and the worker calls
// may be called from any thread and never wait for a step. drain, drain_until and flush may be called
// from any thread; they run one at a time (a drain waits at most its budget for the others; a drain's
// drain_pause sleeps count as its steps' time). A push that exceeds max_pending_bytes waits for
// running steps, then reclaims on the pushing thread. on_error runs on whichever thread made the
// failing call, possibly two at once: it must be thread-safe and must not call back into the queue.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <new>
#include <system_error>
#include <utility>

#include "cost_model.hpp"
#include "detail/backlog.hpp"
#include "detail/fork_guard.hpp"
#include "detail/step_engine.hpp"
#include "detail/worker.hpp"
#include "mapping.hpp"
#include "os.hpp"
#include "reclaim_options.hpp"
#include "shm_region.hpp"
#include "stats.hpp"
#include "unique_fd.hpp"

namespace deferred_unmap {

template <class Clock = std::chrono::steady_clock, class Os = posix_os>
class basic_reclaim_queue {
    static_assert(std::chrono::is_clock_v<Clock>, "basic_reclaim_queue<Clock, Os>: Clock must be a std::chrono clock");
    static_assert(os_policy<Os>, "basic_reclaim_queue<Clock, Os>: Os must provide static noexcept map/unmap/close");

public:
    using clock = Clock;
    using time_point = typename Clock::time_point;
    using unique_fd_type = basic_unique_fd<Os>;
    using mapping_type = basic_mapping<Os>;
    using shm_region_type = basic_shm_region<Os>;

    /// Reserves options.initial_capacity items and starts the worker if asked. A worker that cannot be
    /// started (no thread, no pipe) leaves a queue that tears down inline, with the errno in
    /// stats().worker_error. Throws std::system_error (EINVAL: validate(options) refused them) or
    /// std::bad_alloc. Without exceptions, each field validate() refuses takes its default: check
    /// validate() first.
    explicit basic_reclaim_queue(reclaim_options options = {})
        : options_(checked(std::move(options))),
          books_(options_.max_delay, options_.prior),
          engine_(books_, options_, chunk_size(options_.unmap_chunk_bytes)),
          worker_(books_, engine_, options_) {
        if (options_.close_on_worker && !options_.unmap_on_worker) {  // worker_.hand_off() refuses when it is not running
            hand_off_ = [this](int fd, std::size_t bytes) { return worker_.hand_off(fd, bytes); };
            // A run with no budget (flush, a push over the cap) that cannot hand a close off makes it
            // itself, but only once the worker has made the older ones. The wait is safe under the
            // step lock: this worker only closes and never takes it.
            hand_off_or_wait_ = [this](int fd, std::size_t bytes) {
                if (worker_.hand_off(fd, bytes)) return true;
                worker_.wake();
                worker_.wait_idle();
                return false;
            };
        }
        if (!books_.reserve(options_.initial_capacity)) throw_bad_alloc();
        // Enrolled before the worker starts, and leaves after it stops: a fork in between would give
        // the child a copy whose worker it takes for running.
        detail::fork_registry::enroll(fork_hooks_);
        if (options_.close_on_worker || options_.unmap_on_worker) books_.note_worker_error(worker_.start());
    }

    basic_reclaim_queue(const basic_reclaim_queue&) = delete;
    basic_reclaim_queue& operator=(const basic_reclaim_queue&) = delete;

    /// Flushes everything, then stops the worker. Never throws. May block for the whole teardown.
    ~basic_reclaim_queue() {
        flush();
        worker_.stop();
        detail::fork_registry::leave(fork_hooks_);
    }

    /// Takes the pool: its mapping is unmapped first, its descriptor closed after. O(1) amortised,
    /// no syscall, allocates only when a burst outgrows the ring. Any thread. See max_pending_bytes.
    void push(shm_region_type&& region) noexcept {
        auto parts = region.release();  // not a structured binding: clang-tidy 14's analyzer misreads it
        const std::size_t length = parts.map ? detail::round_up_to_page(parts.map.size()) : 0;
        auto* const addr = static_cast<std::byte*>(parts.map.release().data());
        enqueue({addr, length, 0, parts.fd.release(), length});
    }

    /// Takes a mapping whose descriptor is closed or owned elsewhere. Same costs as push(shm_region&&).
    void push(mapping_type&& map) noexcept {
        const std::size_t length = map ? detail::round_up_to_page(map.size()) : 0;
        enqueue({static_cast<std::byte*>(map.release().data()), length, 0, -1, 0});
    }

    /// Takes a descriptor; `bytes_hint` (what its close frees, if known) lets drain predict the close.
    /// 0: unknown; a drain that must predict the close (not one that hands it to the worker) asks the
    /// Os first (posix_os: one fstat), and where it cannot tell, predicts it fits no deadline: then
    /// only drain()'s first step, a flush or a push over a cap makes it. Same costs as push(region).
    void push(unique_fd_type&& fd, std::size_t bytes_hint = 0) noexcept {
        enqueue({nullptr, 0, 0, fd.release(), bytes_hint, bytes_hint > 0});
    }

    /// Runs steps, oldest item first (a close that does not fit waits for the next run, one at most,
    /// while later munmaps go on), while each predicted step fits what is left of `budget`; the first
    /// step always runs. drain(0) does nothing. Blocks for about `budget` plus one step (or one late
    /// wake-up from drain_pause), never longer waiting for another thread's steps (then report.busy).
    /// Never throws, never allocates (except to hand a close to a full worker ring). With
    /// unmap_on_worker it only hands the work over.
    drain_report drain(std::chrono::nanoseconds budget) noexcept {
        const time_point start = Clock::now();
        if (budget <= std::chrono::nanoseconds::zero()) return finish(drain_report{});
        return run_drain(start, {.deadline = detail::saturating_add<Clock>(start, budget), .first_step_free = true,
                                 .unmap_pause = unmap_pause()});
    }

    /// Runs steps while each is predicted to end by `deadline`; never starts one predicted to end later,
    /// so a frame thread that is already late may call it safely. A pool's first munmap is predicted at
    /// the cautious rate it is sized at, about max_step: a deadline nearer than that starts none. An item whose one step can never fit
    /// (a close longer than any deadline given) still goes: through drain() from the idle timer, whose
    /// first step always runs, or on the worker. With drain_pause it may end late by how much one sleep
    /// outlasts what the queue has learned its sleeps take. Otherwise as drain().
    drain_report drain_until(time_point deadline) noexcept {
        return run_drain(Clock::now(), {.deadline = deadline, .first_step_free = false, .unmap_pause = unmap_pause()});
    }

    /// Tears everything down now and waits for the worker: the munmaps on this thread, and the closes
    /// too, except with close_on_worker without unmap_on_worker, where they go to the worker after the
    /// closes it already holds, as a drain's do (so they count as worker steps, the model does not
    /// learn from them, and worker_done_fd() becomes readable). Never throws. May block for the whole
    /// teardown. Waits for any other thread's steps first.
    void flush() noexcept {
        drain_report scratch;
        engine_.run_blocking({.hand_off = hands_off_closes(), .site = detail::step_site::flush}, scratch, hand_off_or_wait_);
        if (scratch.fds_handed_off > 0) worker_.wake();
        worker_.wait_idle();  // at once without a running worker
    }

    /// Mapped bytes still waiting to be unmapped (what max_pending_bytes caps). Any thread; O(1).
    [[nodiscard]] std::size_t pending_bytes() const noexcept { return books_.pending_bytes(); }
    /// Items not yet fully torn down, the worker's included. Any thread; O(1).
    [[nodiscard]] std::size_t pending_items() const noexcept { return books_.pending_items(); }
    /// Nothing left anywhere, the worker's closes included. Any thread; O(1).
    [[nodiscard]] bool empty() const noexcept { return pending_items() == 0; }

    /// The latest time the host should call drain() even if no frame is committed: max_delay after the
    /// later of the last drain and the push that found nothing waiting. time_point::max() when nothing
    /// waits for a drain (the worker may still hold work: see worker_done_fd()). Any thread; short lock.
    [[nodiscard]] time_point next_deadline() const noexcept { return books_.next_deadline(); }

    /// Totals, histograms and the last burst. Any thread; a short lock, never waits for a step.
    /// Copies ~3 KiB.
    [[nodiscard]] reclaim_stats stats() const noexcept { return books_.stats(); }

    /// The cost model as learned so far. Any thread; a short lock, never waits for a step.
    [[nodiscard]] cost_model model() const noexcept { return books_.model(); }

    [[nodiscard]] const reclaim_options& options() const noexcept { return options_; }

    /// A descriptor that becomes readable when the worker runs out of work; -1 without a worker. Poll
    /// it for reading from the host's loop; call clear_worker_done() when it fires. Any thread.
    [[nodiscard]] int worker_done_fd() const noexcept { return uses_worker() ? worker_.done_fd() : -1; }

    /// Empties worker_done_fd(); it becomes readable again after the worker next runs out of work.
    /// Clear before looking at empty(), so no wakeup is lost. Any thread; one read(2).
    void clear_worker_done() noexcept {
        if (uses_worker()) worker_.clear_done();
    }

    /// Waits at most `timeout` of real time for the worker to hold nothing. True when it holds nothing
    /// (always without a worker). Any thread but the worker's own callbacks.
    bool wait_for_worker(std::chrono::nanoseconds timeout) noexcept {
        return !uses_worker() || worker_.wait_idle_for(timeout);
    }

private:
    using item = detail::reclaim_item;

    // A negative max_delay would put every deadline before the last drain: an idle timer would spin.
    static reclaim_options checked(reclaim_options options) {
        options.max_delay = std::max(options.max_delay, std::chrono::nanoseconds::zero());
        if (!validate(options)) return options;
#if DEFERRED_UNMAP_HAS_EXCEPTIONS
        throw std::system_error(validate(options), "deferred_unmap::reclaim_options: refused by validate()");
#else
        return with_defaults_for_invalid(std::move(options));
#endif
    }

#if !DEFERRED_UNMAP_HAS_EXCEPTIONS
    // Without exceptions a refused field takes its default, so a NaN cannot switch step sizing off.
    static reclaim_options with_defaults_for_invalid(reclaim_options options) noexcept {
        const reclaim_options defaults;
        if (!options.prior.valid()) options.prior = defaults.prior;
        if (!detail::valid_max_step(options.max_step)) options.max_step = defaults.max_step;
        if (!detail::valid_step_deviations(options.max_step_deviations))
            options.max_step_deviations = defaults.max_step_deviations;
        if (!detail::valid_first_step_rate(options.first_step_ns_per_byte))
            options.first_step_ns_per_byte = defaults.first_step_ns_per_byte;
        if (!detail::valid_drain_pause(options.drain_pause)) options.drain_pause = defaults.drain_pause;
        if (!detail::valid_worker_pause(options.worker_pause)) options.worker_pause = defaults.worker_pause;
        if (!detail::valid_max_pending_items(options.max_pending_items)) options.max_pending_items = defaults.max_pending_items;
        return options;
    }
#endif

    static std::size_t chunk_size(std::size_t requested) noexcept {
        const std::size_t page = detail::page_size();
        // Rounding up a request past the last page multiple would wrap to zero: cap it instead.
        constexpr std::size_t largest = std::numeric_limits<std::size_t>::max();
        if (requested > largest - page) return largest / page * page;
        return std::max(detail::round_up_to_page(requested), page);
    }

    static void throw_bad_alloc() {
#if DEFERRED_UNMAP_HAS_EXCEPTIONS
        throw std::bad_alloc();
#endif
    }

    // An Os that cannot sleep runs steps back to back rather than budget for a pause it cannot take.
    [[nodiscard]] std::chrono::nanoseconds unmap_pause() const noexcept {
        if constexpr (has_pause<Os>) return options_.drain_pause;
        else return std::chrono::nanoseconds::zero();
    }

    // The worker runs in this process: it was asked for, could be started, and this is not a fork's child.
    [[nodiscard]] bool uses_worker() const noexcept { return worker_.running(); }
    // Closes go to the worker one by one only when it makes no other call: with unmap_on_worker it
    // closes each item itself, in its turn, and a close handed to it beside that could overtake one.
    [[nodiscard]] bool hands_off_closes() const noexcept {
        return options_.close_on_worker && !options_.unmap_on_worker && uses_worker();
    }

    drain_report finish(drain_report report) const noexcept {
        report.pending_bytes = pending_bytes();
        report.pending_items = pending_items();
        return report;
    }

    drain_report run_drain(time_point start, detail::step_limits<Clock> limits) noexcept {
        drain_report report;
        bool did_work = false;
        if (options_.unmap_on_worker && uses_worker()) {
            did_work = books_.hand_over();
            if (did_work) worker_.wake();
        } else {
            limits.hand_off = hands_off_closes();
            report.busy = !engine_.try_run(limits, report, hand_off_);
            did_work = report.steps > 0 || report.fds_handed_off > 0;
            if (report.fds_handed_off > 0) worker_.wake();
        }
        report.elapsed = detail::elapsed<Clock>(start, Clock::now());
        books_.record_drain(start, report.elapsed, report, did_work);
        return finish(report);
    }

    void enqueue(const item& it) noexcept {
        if (it.addr == nullptr && it.fd < 0) return;
        if (!books_.push(it)) return tear_down_after_the_rest(it);
        if (!books_.over_cap(options_.max_pending_bytes, options_.max_pending_items)) return;
        drain_report scratch;
        engine_.run_blocking({.hand_off = hands_off_closes(), .until_under_cap = true, .site = detail::step_site::cap},
                             scratch, hand_off_or_wait_);
        if (scratch.fds_handed_off > 0) worker_.wake();
    }

    // The queue cannot grow: everything older goes first, oldest first (the worker's closes included),
    // then `it`, so a mapping is still unmapped before a descriptor pushed after it is closed.
    void tear_down_after_the_rest(const item& it) noexcept {
        flush();
        engine_.tear_down_now(it);
    }

    // fork(): the step lock, then the worker's, then the books', as every other path takes them.
    static void before_fork(void* self) noexcept DU_NO_THREAD_SAFETY_ANALYSIS {
        auto* q = static_cast<basic_reclaim_queue*>(self);
        q->engine_.lock_for_fork();
        q->worker_.lock_for_fork();
        q->books_.lock_for_fork();
    }
    static void after_fork_in_parent(void* self) noexcept DU_NO_THREAD_SAFETY_ANALYSIS {
        auto* q = static_cast<basic_reclaim_queue*>(self);
        q->books_.unlock_after_fork();
        q->worker_.unlock_after_fork();
        q->engine_.unlock_after_fork();
    }
    static void after_fork_in_child(void* self) noexcept {
        auto* q = static_cast<basic_reclaim_queue*>(self);
        q->engine_.renew_after_fork();
        q->books_.renew_after_fork();
        q->worker_.renew_after_fork();
    }

    const reclaim_options options_;
    detail::backlog<Clock> books_;
    detail::step_engine<Clock, Os> engine_;
    typename detail::step_engine<Clock, Os>::hand_off_fn hand_off_;  // empty unless hands_off_closes()
    typename detail::step_engine<Clock, Os>::hand_off_fn hand_off_or_wait_;  // the same, for runs with no budget
    detail::worker<Clock, Os> worker_;  // its thread stops before the rest goes
    detail::fork_participant fork_hooks_{this, &before_fork, &after_fork_in_parent, &after_fork_in_child};
};

using reclaim_queue = basic_reclaim_queue<std::chrono::steady_clock, posix_os>;

}  // namespace deferred_unmap

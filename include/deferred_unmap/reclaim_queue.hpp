// deferred_unmap/reclaim_queue.hpp - dead shm pools, torn down a budgeted slice per frame.
//
// Guarantees: every pushed item is torn down exactly once, oldest first, mapping before descriptor.
// drain(budget) cuts the work into steps (one munmap of at most unmap_chunk_bytes, or one close),
// predicts each step's cost from a model learned online, and starts a step only if it fits what is left
// of the budget; the first step always runs, so overshoot is at most one step and every call makes
// progress. Errors never throw and never lose an item: they are counted and passed to on_error.
//
//   deferred_unmap::reclaim_queue queue{{.close_on_worker = true}};
//   void on_pool_destroyed(pool& p) { queue.push(std::move(p.region)); }      // O(1), no syscall
//   void on_frame_committed() { queue.drain(std::chrono::milliseconds{1}); }  // ~1 ms of teardown
//   void on_idle_timer() { queue.drain(std::chrono::milliseconds{4}); }       // armed at next_deadline()
//   // ~reclaim_queue() flushes whatever is left.
//
// Threads: push, pending_bytes, pending_items, empty, next_deadline and stats may be called from any
// thread. drain and flush may be called from any thread but one at a time; a push that exceeds
// max_pending_bytes waits for a running drain or flush to finish, then reclaims on the pushing thread.
// on_error runs on whichever thread made the failing call (drainer, pusher or worker), possibly on two
// at once: it must be thread-safe and must not call back into the queue.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <limits>
#include <mutex>
#include <stop_token>
#include <thread>

#include "cost_model.hpp"
#include "detail/ring.hpp"
#include "mapping.hpp"
#include "os.hpp"
#include "shm_region.hpp"
#include "stats.hpp"
#include "unique_fd.hpp"

namespace deferred_unmap {

struct reclaim_options {
    /// Largest munmap per step, rounded up to whole pages. 2 MiB steps cost ~8% more in total than one
    /// munmap of a 19.8 MiB pool; 512 KiB steps ~30%.
    std::size_t unmap_chunk_bytes = std::size_t{2} << 20;
    /// Hard cap on mapped bytes waiting; a push beyond it reclaims the oldest at once until it fits.
    std::size_t max_pending_bytes = std::numeric_limits<std::size_t>::max();
    /// How long work may wait without a drain; see next_deadline(). A negative value counts as zero.
    std::chrono::nanoseconds max_delay = std::chrono::milliseconds{100};
    /// A worker thread makes the close() calls after drain has unmapped; drain's budget covers munmap only.
    bool close_on_worker = false;
    /// The worker makes every call, one chunk at a time with worker_pause between chunks; drain only
    /// hands work over. Implies a worker.
    bool unmap_on_worker = false;
    /// Gap the worker leaves between munmap chunks, so a waiting mmap() gets the lock.
    std::chrono::nanoseconds worker_pause = std::chrono::microseconds{100};
    /// Where the cost model starts.
    cost_model prior{};
    /// Items reserved up front, so pushes allocate nothing until a burst exceeds it.
    std::size_t initial_capacity = 64;
    /// Called for each failed munmap/close, on the thread that made the call (possibly two at once).
    /// Must be thread-safe; must not throw into the queue or call back into it.
    std::function<void(const reclaim_error&)> on_error{};
};

namespace detail {

inline void add(reclaim_stats& into, const reclaim_stats& from) noexcept {
    into.items_pushed += from.items_pushed;
    into.bytes_pushed += from.bytes_pushed;
    into.items_reclaimed += from.items_reclaimed;
    into.bytes_unmapped += from.bytes_unmapped;
    into.fds_closed += from.fds_closed;
    into.drains += from.drains;
    into.steps += from.steps;
    into.worker_steps += from.worker_steps;
    into.unmap_errors += from.unmap_errors;
    into.close_errors += from.close_errors;
    into.fallback_unmaps += from.fallback_unmaps;
    into.bytes_leaked += from.bytes_leaked;
    into.synchronous_pushes += from.synchronous_pushes;
    into.cap_steps += from.cap_steps;
    into.peak_pending_bytes = std::max(into.peak_pending_bytes, from.peak_pending_bytes);
    into.peak_pending_items = std::max(into.peak_pending_items, from.peak_pending_items);
    into.drain_durations.merge(from.drain_durations);
    into.step_durations.merge(from.step_durations);
    into.worker_step_durations.merge(from.worker_step_durations);
}

}  // namespace detail

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

    /// Reserves options.initial_capacity items and starts the worker if asked. May throw std::bad_alloc
    /// or std::system_error (thread creation).
    explicit basic_reclaim_queue(reclaim_options options = {})
        : options_(checked(std::move(options))), chunk_bytes_(chunk_size(options_.unmap_chunk_bytes)), model_(options_.prior) {
        if (!pending_.reserve(options_.initial_capacity)) throw_bad_alloc();
        if (uses_worker()) {
            if (!closes_.reserve(options_.initial_capacity)) throw_bad_alloc();
            worker_ = std::jthread([this](std::stop_token stop) { worker_main(stop); });
        }
    }

    basic_reclaim_queue(const basic_reclaim_queue&) = delete;
    basic_reclaim_queue& operator=(const basic_reclaim_queue&) = delete;

    /// Flushes everything, then stops the worker. Never throws. May block for the whole teardown.
    ~basic_reclaim_queue() { flush(); }

    /// Takes the pool: its mapping is unmapped first, its descriptor closed after. O(1) amortised,
    /// no syscall, allocates only when a burst outgrows the ring. Any thread. See max_pending_bytes.
    void push(shm_region_type&& region) noexcept {
        auto parts = region.release();  // not a structured binding: clang-tidy 14's analyzer misreads it
        const std::size_t length = parts.map ? detail::round_up_to_page(parts.map.size()) : 0;
        auto* const addr = static_cast<std::byte*>(parts.map.release().data());
        enqueue(addr, length, parts.fd.release(), length);
    }

    /// Takes a mapping whose descriptor is closed or owned elsewhere. Same costs as push(shm_region&&).
    void push(mapping_type&& map) noexcept {
        const std::size_t length = map ? detail::round_up_to_page(map.size()) : 0;
        enqueue(static_cast<std::byte*>(map.release().data()), length, -1, 0);
    }

    /// Takes a descriptor; `bytes_hint` (the memfd's size, if known) lets drain predict its close.
    void push(unique_fd_type&& fd, std::size_t bytes_hint = 0) noexcept { enqueue(nullptr, 0, fd.release(), bytes_hint); }

    /// Runs steps, oldest item first, while each predicted step fits in what is left of `budget`; the
    /// first step always runs when budget > 0. drain(0) does nothing. Never throws, never allocates
    /// (except when handing a close to a full worker ring). Blocks for about `budget` plus one step.
    /// One draining thread at a time. With unmap_on_worker, only wakes the worker.
    drain_report drain(std::chrono::nanoseconds budget) noexcept {
        drain_report report;
        if (budget <= std::chrono::nanoseconds::zero()) return finish(report);
        if (options_.unmap_on_worker) {
            note_drain(Clock::now());  // the handover counts as a drain: next_deadline() moves on
            wake_worker_for_unmaps();
            return finish(report);
        }
        std::lock_guard drain_lock(drain_mutex_);
        const time_point start = Clock::now();
        note_drain(start);
        time_point now = start;
        while (load_current()) {
            if (hand_off_close(report)) {
                now = Clock::now();  // so the hand-off is not timed as part of the next step
                if (elapsed(start, now) >= budget) break;  // bare fds pushed without end still stop
                continue;
            }
            if (report.steps > 0 && elapsed(start, now) + predict_next() > budget) break;
            now = timed_step(now, report, step_site::drain);
        }
        report.elapsed = elapsed(start, now);
        if (report.steps > 0) {
            ++stats_.drains;
            stats_.drain_durations.record(report.elapsed);
        }
        if (report.fds_handed_off > 0) worker_cv_.notify_one();
        return finish(report);
    }

    /// Tears everything down now, on this thread, and waits for the worker's closes. Never throws.
    /// May block for the whole teardown. One draining thread at a time.
    void flush() noexcept {
        {
            std::lock_guard drain_lock(drain_mutex_);
            drain_report scratch;
            time_point now = Clock::now();
            while (load_current()) now = timed_step(now, scratch, step_site::flush);
        }
        wait_for_worker();
    }

    /// Mapped bytes still waiting to be unmapped (what max_pending_bytes caps). Any thread; O(1).
    [[nodiscard]] std::size_t pending_bytes() const noexcept { return pending_bytes_.load(std::memory_order_relaxed); }
    /// Items not yet fully torn down, counting closes the worker has not made yet. Any thread; O(1).
    [[nodiscard]] std::size_t pending_items() const noexcept { return pending_items_.load(std::memory_order_relaxed); }
    [[nodiscard]] bool empty() const noexcept { return pending_items() == 0; }

    /// The latest time the host should call drain() even if no frame is committed: max_delay after the
    /// later of the last drain and the push that found nothing waiting (never later than max_delay after
    /// the later of the last drain and the oldest waiting push). time_point::max() when nothing waits for
    /// a drain. Any thread; takes a short lock.
    [[nodiscard]] time_point next_deadline() const noexcept {
        std::lock_guard lock(mutex_);
        if (!in_flight_ && pending_.empty()) return time_point::max();
        const time_point from = std::max(waiting_since_, last_drain_);
        const auto delay = std::chrono::duration_cast<typename Clock::duration>(options_.max_delay);
        // Saturates: a max_delay too long to add means no deadline, not one in the distant past.
        if (from.time_since_epoch().count() > 0 && delay > time_point::max() - from) return time_point::max();
        return from + delay;
    }

    /// Totals and histograms so far. Any thread; waits for a running drain or flush. Copies ~3 KiB.
    [[nodiscard]] reclaim_stats stats() const noexcept {
        std::scoped_lock locks(drain_mutex_, mutex_, worker_mutex_);
        reclaim_stats total = stats_;
        detail::add(total, push_stats_);
        detail::add(total, worker_stats_);
        return total;
    }

    /// The cost model as learned so far. Any thread; waits for a running drain or flush.
    [[nodiscard]] cost_model model() const noexcept {
        std::lock_guard drain_lock(drain_mutex_);
        return model_;
    }

    [[nodiscard]] const reclaim_options& options() const noexcept { return options_; }

private:
    struct item {
        std::byte* addr;          // nullptr for a bare descriptor
        std::size_t length;       // page-rounded mapped length
        std::size_t unmapped;     // bytes of [addr, addr + length) already unmapped
        int fd;                   // -1 for a bare mapping
        std::size_t close_bytes;  // what the close is predicted to free
    };
    struct close_job {
        int fd;
        std::size_t bytes;
    };
    enum class step_site { drain, flush, cap, worker };

    // A negative max_delay would put every deadline before the last drain: an idle timer would spin.
    static reclaim_options checked(reclaim_options options) noexcept {
        options.max_delay = std::max(options.max_delay, std::chrono::nanoseconds::zero());
        return options;
    }

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

    static std::chrono::nanoseconds elapsed(time_point from, time_point to) noexcept {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from);
    }

    [[nodiscard]] bool uses_worker() const noexcept { return options_.close_on_worker || options_.unmap_on_worker; }

    drain_report& finish(drain_report& report) const noexcept {
        report.pending_bytes = pending_bytes();
        report.pending_items = pending_items();
        return report;
    }

    void enqueue(std::byte* addr, std::size_t length, int fd, std::size_t close_bytes) noexcept {
        if (addr == nullptr && fd < 0) return;
        const item it{addr, length, 0, fd, close_bytes};
        bool queued = false;
        {
            std::lock_guard lock(mutex_);
            const bool was_idle = pending_.empty() && !in_flight_;
            queued = pending_.push_back(it);
            if (queued) {
                // Only the push that starts a wait reads the clock: next_deadline() needs no more.
                if (was_idle) waiting_since_ = Clock::now();
                ++push_stats_.items_pushed;
                push_stats_.bytes_pushed += length;
                const std::size_t bytes = pending_bytes_.fetch_add(length, std::memory_order_relaxed) + length;
                const std::size_t items = pending_items_.fetch_add(1, std::memory_order_relaxed) + 1;
                push_stats_.peak_pending_bytes = std::max(push_stats_.peak_pending_bytes, bytes);
                push_stats_.peak_pending_items = std::max(push_stats_.peak_pending_items, items);
            }
        }
        if (!queued) return tear_down_now(it);
        if (pending_bytes() > options_.max_pending_bytes) enforce_cap();
    }

    // The queue could not grow: reclaim the item here rather than leak it.
    void tear_down_now(const item& it) noexcept {
        reclaim_stats done;
        done.items_pushed = done.items_reclaimed = done.synchronous_pushes = 1;
        done.bytes_pushed = it.length;
        if (it.addr != nullptr) {
            if (const int error = Os::unmap(it.addr, it.length); error != 0) {
                ++done.unmap_errors;
                done.bytes_leaked += it.length;
                report_error({reclaim_error::operation::unmap, error, it.addr, it.length, -1, false});
            } else {
                done.bytes_unmapped += it.length;
            }
        }
        if (it.fd >= 0) close_and_count(it.fd, done);
        std::lock_guard lock(mutex_);
        detail::add(push_stats_, done);
    }

    void enforce_cap() noexcept {
        std::lock_guard drain_lock(drain_mutex_);
        drain_report scratch;
        time_point now = Clock::now();
        while (pending_bytes() > options_.max_pending_bytes && load_current()) {
            if (hand_off_close(scratch)) continue;
            now = timed_step(now, scratch, step_site::cap);
        }
        if (scratch.fds_handed_off > 0) worker_cv_.notify_one();
    }

    void note_drain(time_point when) noexcept {
        std::lock_guard lock(mutex_);
        last_drain_ = when;
    }

    // Requires drain_mutex_. Makes the oldest unfinished item current; false when there is none.
    bool load_current() noexcept {
        if (in_flight_) return true;
        std::lock_guard lock(mutex_);
        if (pending_.empty()) return false;
        current_ = pending_.pop_front();
        in_flight_ = true;
        return true;
    }

    // Requires drain_mutex_. The current item is done with (possibly still closing on the worker).
    void retire_current() noexcept {
        std::lock_guard lock(mutex_);
        in_flight_ = false;
    }

    void complete_item(reclaim_stats& counts) noexcept {
        ++counts.items_reclaimed;
        pending_items_.fetch_sub(1, std::memory_order_relaxed);
    }

    [[nodiscard]] bool unmapping() const noexcept { return current_.unmapped < current_.length; }

    [[nodiscard]] std::size_t next_chunk() const noexcept {
        return std::min(chunk_bytes_, current_.length - current_.unmapped);
    }

    // Requires drain_mutex_. The predicted cost of the current item's next step.
    [[nodiscard]] std::chrono::nanoseconds predict_next() const noexcept {
        return unmapping() ? model_.predict_unmap(next_chunk()) : model_.predict_close(current_.close_bytes);
    }

    // Requires drain_mutex_. When the current item only needs its close and a worker closes, passes it on.
    bool hand_off_close(drain_report& report) noexcept {
        if (!options_.close_on_worker || unmapping()) return false;
        {
            std::lock_guard lock(worker_mutex_);
            if (!closes_.push_back({current_.fd, current_.close_bytes})) return false;  // close it here instead
        }
        ++report.fds_handed_off;
        retire_current();
        return true;
    }

    // Requires drain_mutex_. Runs the current item's next step and times it; returns the time after.
    time_point timed_step(time_point before, drain_report& report, step_site site) noexcept {
        const bool unmap = unmapping();
        const std::size_t bytes = unmap ? next_chunk() : current_.close_bytes;
        const int errors = unmap ? unmap_step(bytes, report) : close_step(report);
        const time_point after = Clock::now();
        const std::chrono::nanoseconds took = elapsed(before, after);
        if (errors == 0 && unmap) model_.learn_unmap(bytes, took);
        if (errors == 0 && !unmap) model_.learn_close(bytes, took);
        ++report.steps;
        report.errors += static_cast<std::size_t>(errors);
        if (site == step_site::worker) {
            ++stats_.worker_steps;
            stats_.worker_step_durations.record(took);
        } else {
            ++stats_.steps;
            stats_.step_durations.record(took);
            if (site == step_site::cap) ++stats_.cap_steps;
        }
        if (!unmapping() && (current_.fd < 0 || !unmap)) {
            complete_item(stats_);
            retire_current();
        }
        return after;
    }

    // One munmap of `bytes` from where the current item stands; on failure, one munmap of the whole rest.
    int unmap_step(std::size_t bytes, drain_report& report) noexcept {
        std::byte* at = current_.addr + current_.unmapped;
        const std::size_t rest = current_.length - current_.unmapped;
        int errors = 0;
        std::size_t freed = bytes;
        if (const int error = Os::unmap(at, bytes); error != 0) {
            ++errors;
            ++stats_.unmap_errors;
            freed = rest;
            const int retry = rest > bytes ? Os::unmap(at, rest) : error;
            if (rest > bytes) ++stats_.fallback_unmaps;
            report_error({reclaim_error::operation::unmap, error, at, bytes, -1, retry == 0});
            if (retry != 0) {
                if (rest > bytes) {
                    ++errors;
                    ++stats_.unmap_errors;
                    report_error({reclaim_error::operation::unmap, retry, at, rest, -1, false});
                }
                stats_.bytes_leaked += rest;
                freed = 0;
            }
        }
        const std::size_t advanced = errors == 0 ? bytes : rest;
        current_.unmapped += advanced;
        pending_bytes_.fetch_sub(advanced, std::memory_order_relaxed);
        stats_.bytes_unmapped += freed;
        report.bytes_unmapped += freed;
        return errors;
    }

    int close_step(drain_report& report) noexcept {
        ++report.fds_closed;
        return close_and_count(current_.fd, stats_);
    }

    int close_and_count(int fd, reclaim_stats& counts) noexcept {
        ++counts.fds_closed;
        const int error = Os::close(fd);
        if (error == 0) return 0;
        ++counts.close_errors;
        report_error({reclaim_error::operation::close, error, nullptr, 0, fd, false});
        return 1;
    }

    void report_error(const reclaim_error& error) const noexcept {
        if (!options_.on_error) return;
#if DEFERRED_UNMAP_HAS_EXCEPTIONS
        try {
            options_.on_error(error);
        } catch (...) {
            // A teardown path must not throw; the error is already counted in stats.
        }
#else
        options_.on_error(error);
#endif
    }

    // ---- worker ----

    void wake_worker_for_unmaps() noexcept {
        {
            std::lock_guard lock(worker_mutex_);
            unmaps_released_ = true;
        }
        worker_cv_.notify_one();
    }

    void worker_main(std::stop_token stop) noexcept {
        std::unique_lock lock(worker_mutex_);
        while (worker_cv_.wait(lock, stop, [this] { return !closes_.empty() || unmaps_released_; })) {
            worker_busy_ = true;
            if (!closes_.empty()) {
                const close_job job = closes_.pop_front();
                lock.unlock();
                worker_close(job);
                lock.lock();
            } else {
                lock.unlock();
                const bool more = worker_unmap_step();
                if (more) std::this_thread::sleep_for(options_.worker_pause);
                lock.lock();
                if (!more) unmaps_released_ = false;
            }
            worker_busy_ = false;
            if (closes_.empty() && !unmaps_released_) idle_cv_.notify_all();
        }
    }

    void worker_close(const close_job& job) noexcept {
        const time_point before = Clock::now();
        reclaim_stats counts;
        close_and_count(job.fd, counts);
        counts.worker_step_durations.record(elapsed(before, Clock::now()));
        ++counts.worker_steps;
        complete_item(counts);
        std::lock_guard lock(worker_mutex_);
        detail::add(worker_stats_, counts);
    }

    // One step of the oldest item, on the worker. False when nothing is left.
    bool worker_unmap_step() noexcept {
        std::lock_guard drain_lock(drain_mutex_);
        if (!load_current()) return false;
        drain_report scratch;
        timed_step(Clock::now(), scratch, step_site::worker);
        return true;
    }

    void wait_for_worker() noexcept {
        if (!uses_worker()) return;
        std::unique_lock lock(worker_mutex_);
        idle_cv_.wait(lock, [this] { return closes_.empty() && !worker_busy_ && !unmaps_released_; });
    }

    const reclaim_options options_;
    const std::size_t chunk_bytes_;

    // Pending items and what next_deadline() reads; taken briefly by push and once per item by drain.
    mutable std::mutex mutex_;
    detail::ring<item> pending_;
    bool in_flight_ = false;  // current_ holds an item (written under both locks)
    time_point last_drain_{};
    time_point waiting_since_{};  // when the push into an idle queue came
    reclaim_stats push_stats_;

    // Held by whoever runs steps: drain, flush, cap enforcement, the worker in unmap_on_worker mode.
    mutable std::mutex drain_mutex_;
    item current_{};
    cost_model model_;
    reclaim_stats stats_;

    std::atomic<std::size_t> pending_bytes_{0};
    std::atomic<std::size_t> pending_items_{0};

    // The worker's closes; the worker thread itself is declared last so it stops before the rest goes.
    mutable std::mutex worker_mutex_;
    std::condition_variable_any worker_cv_;
    std::condition_variable idle_cv_;
    detail::ring<close_job> closes_;
    bool unmaps_released_ = false;
    bool worker_busy_ = false;
    reclaim_stats worker_stats_;
    std::jthread worker_;
};

using reclaim_queue = basic_reclaim_queue<std::chrono::steady_clock, posix_os>;

}  // namespace deferred_unmap

// deferred_unmap/detail/backlog.hpp - the queue's books: waiting items, deadlines, bursts, totals.
//
// Everything here sits behind one short lock that is never held across a system call, so push,
// stats() and next_deadline() wait for nothing but bookkeeping, whatever a step on another thread does.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>

#include "../cost_model.hpp"
#include "../stats.hpp"
#include "ring.hpp"
#include "thread_annotations.hpp"

namespace deferred_unmap::detail {

/// One pushed resource. `unmapped` advances as munmap steps run; the descriptor goes last.
struct reclaim_item {
    std::byte* addr = nullptr;     // nullptr for a bare descriptor
    std::size_t length = 0;        // page-rounded mapped length
    std::size_t unmapped = 0;      // bytes of [addr, addr + length) already unmapped
    int fd = -1;                   // -1 for a bare mapping
    std::size_t close_bytes = 0;   // what the close is predicted to free
    bool close_bytes_known = true;  // false: a descriptor pushed with no size, not yet asked
};

enum class step_site { drain, flush, cap, worker };

/// What one munmap or close did, for the books.
struct step_outcome {
    step_site site = step_site::drain;
    std::chrono::nanoseconds took{0};
    std::size_t advanced = 0;        // mapped bytes no longer pending (unmapped or given up as leaked)
    std::size_t freed = 0;           // bytes actually unmapped
    std::size_t leaked = 0;          // bytes left mapped because even the fallback failed
    bool closed = false;             // a close() was made
    unsigned unmap_errors = 0;
    unsigned close_errors = 0;
    bool fallback = false;           // a failed chunk was retried as one munmap of the rest
    bool item_done = false;          // the item is fully torn down
    struct prediction {
        std::chrono::nanoseconds predicted{-1};  // -1: not a munmap step
        std::chrono::nanoseconds learned{0};     // what the model learned from: min(wall, thread CPU)
        bool over_max_step = false;
    } unmap_prediction;
};

template <class Clock>
class backlog {
public:
    using time_point = typename Clock::time_point;

    backlog(std::chrono::nanoseconds max_delay, const cost_model& prior) noexcept : max_delay_(max_delay), model_(prior) {}

    /// Room for `count` waiting items. One allocation at most; false when it fails.
    bool reserve(std::size_t count) DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        return items_.reserve(count);
    }

    /// Queues `it`. O(1) amortised; allocates only when the ring is full; false (nothing recorded)
    /// when it cannot grow. Reads the clock only when the push starts a wait or a burst.
    bool push(const reclaim_item& it) DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        const bool nothing_waits = items_.empty() && in_flight_ == 0;
        if (!items_.push_back(it)) return false;
        const bool burst_starts = pending_items() == 0;
        if (nothing_waits || burst_starts) {
            const time_point now = Clock::now();
            if (nothing_waits) waiting_since_ = now;
            if (burst_starts) start_burst(now);
        }
        ++stats_.items_pushed;
        stats_.bytes_pushed += it.length;
        ++burst_.items;
        burst_.bytes += it.length;
        waiting_items_.fetch_add(1, std::memory_order_relaxed);
        const std::size_t bytes = pending_bytes_.fetch_add(it.length, std::memory_order_relaxed) + it.length;
        const std::size_t items = pending_items_.fetch_add(1, std::memory_order_relaxed) + 1;
        stats_.peak_pending_bytes = std::max(stats_.peak_pending_bytes, bytes);
        stats_.peak_pending_items = std::max(stats_.peak_pending_items, items);
        return true;
    }

    /// Puts the oldest waiting item in flight (beside, at most, one whose close was set aside). False
    /// when nothing waits, which also ends a hand-over to the worker (it has nothing left to do: with
    /// unmap_on_worker no close is ever set aside).
    bool pop(reclaim_item& out) DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        if (items_.empty()) {
            handed_over_.store(false, std::memory_order_relaxed);
            return false;
        }
        out = items_.pop_front();
        ++in_flight_;
        return true;
    }

    /// An item in flight needs no more steps on this side (its close went to the worker).
    void retire() DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        --in_flight_;
        waiting_items_.fetch_sub(1, std::memory_order_relaxed);
    }

    /// Books one step; `model` is what the stepping thread learned, published for model().
    void record_step(const step_outcome& step, const cost_model& model, time_point when) DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        pending_bytes_.fetch_sub(step.advanced, std::memory_order_relaxed);
        stats_.bytes_unmapped += step.freed;
        stats_.bytes_leaked += step.leaked;
        stats_.unmap_errors += step.unmap_errors;
        stats_.close_errors += step.close_errors;
        stats_.fallback_unmaps += step.fallback ? 1 : 0;
        stats_.fds_closed += step.closed ? 1 : 0;
        if (step.unmap_prediction.predicted.count() >= 0) {
            const auto [predicted, learned, over] = step.unmap_prediction;
            stats_.unmap_prediction_error.record(learned > predicted ? learned - predicted : predicted - learned);
            stats_.unmap_steps_over_max_step += over ? 1 : 0;
        }
        if (step.site == step_site::worker) {
            ++stats_.worker_steps;
            stats_.worker_step_durations.record(step.took);
        } else {
            ++stats_.steps;
            stats_.step_durations.record(step.took);
            stats_.cap_steps += step.site == step_site::cap ? 1 : 0;
        }
        model_ = model;
        if (step.item_done) {
            --in_flight_;
            waiting_items_.fetch_sub(1, std::memory_order_relaxed);
            complete_locked(when);
        }
    }

    /// Books an item torn down at once by a push that found no room (it never waited).
    void record_immediate(std::size_t length, const step_outcome& unmap, bool closed, unsigned close_errors)
        DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        ++stats_.items_pushed;
        ++stats_.items_reclaimed;
        ++stats_.synchronous_pushes;
        stats_.bytes_pushed += length;
        stats_.bytes_unmapped += unmap.freed;
        stats_.bytes_leaked += unmap.leaked;
        stats_.unmap_errors += unmap.unmap_errors;
        stats_.fds_closed += closed ? 1 : 0;
        stats_.close_errors += close_errors;
        if (pending_items() > 0) {
            ++burst_.items;
            burst_.bytes += length;
        }
    }

    /// Books a close the worker made for an item whose mapping is already gone.
    void record_worker_close(std::chrono::nanoseconds took, unsigned close_errors, time_point when) DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        ++stats_.fds_closed;
        stats_.close_errors += close_errors;
        ++stats_.worker_steps;
        stats_.worker_step_durations.record(took);
        complete_locked(when);
    }

    /// Books a drain call that began at `start` and took `elapsed`. `did_work`: it ran a step or passed
    /// work on. Only such a drain, or one that found another thread at work, moves next_deadline() on:
    /// a drain_until() that is always too late to start anything must not keep the idle timer away.
    void record_drain(time_point start, std::chrono::nanoseconds elapsed, const drain_report& report, bool did_work)
        DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        if (did_work || report.busy) last_drain_ = start;
        stats_.busy_drains += report.busy ? 1 : 0;
        if (report.steps > 0) {
            ++stats_.drains;
            stats_.drain_durations.record(elapsed);
        }
        if (!did_work) return;
        // The drain's last step may have ended the burst; it still counts towards that burst.
        burst_report* burst = pending_items() > 0 ? &burst_ : burst_ended_ >= start ? &stats_.last_burst : nullptr;
        if (burst == nullptr) return;
        ++burst->drains;
        burst->worst_drain = std::max(burst->worst_drain, elapsed);
    }

    /// Passes everything waiting, and whatever is pushed until the worker finds nothing, to the worker.
    /// False when nothing waits or the worker already has it: then there is nobody to wake.
    bool hand_over() DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        if (items_.empty() && in_flight_ == 0) return false;
        return !handed_over_.exchange(true, std::memory_order_relaxed);
    }
    [[nodiscard]] bool handed_over() const noexcept { return handed_over_.load(std::memory_order_relaxed); }

    /// See basic_reclaim_queue::next_deadline().
    [[nodiscard]] time_point next_deadline() const DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        if ((items_.empty() && in_flight_ == 0) || handed_over()) return time_point::max();
        const time_point from = std::max(waiting_since_, last_drain_);
        const auto delay = std::chrono::duration_cast<typename Clock::duration>(max_delay_);
        // Saturates: a max_delay too long to add means no deadline, not one in the distant past.
        if (from.time_since_epoch().count() > 0 && delay > time_point::max() - from) return time_point::max();
        return from + delay;
    }

    [[nodiscard]] reclaim_stats stats() const DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        return stats_;
    }
    [[nodiscard]] cost_model model() const DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        return model_;
    }

    /// Items that still wait for a step of the queue's own (a drain, a flush, a push over a cap, the
    /// unmapping worker), not for a close handed to the worker: what max_pending_items caps. O(1).
    [[nodiscard]] std::size_t waiting_items() const noexcept { return waiting_items_.load(std::memory_order_relaxed); }
    /// More mapped bytes or more waiting items than the caps allow. O(1), no lock.
    [[nodiscard]] bool over_cap(std::size_t max_bytes, std::size_t max_items) const noexcept {
        return pending_bytes() > max_bytes || waiting_items() > max_items;
    }

    /// Books why the worker could not be started (0: it was, or none was asked for).
    void note_worker_error(int error) DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        stats_.worker_error = error;
    }

    // ---- fork(): see fork_guard.hpp.
    void lock_for_fork() DU_ACQUIRE(mutex_) { mutex_.lock(); }
    void unlock_after_fork() DU_RELEASE(mutex_) { mutex_.unlock(); }
    /// In the child: a free lock, and nothing handed over to a worker the child does not have.
    void renew_after_fork() noexcept {
        mutex_.renew_after_fork();
        handed_over_.store(false, std::memory_order_relaxed);
    }

    [[nodiscard]] std::size_t pending_bytes() const noexcept { return pending_bytes_.load(std::memory_order_relaxed); }
    [[nodiscard]] std::size_t pending_items() const noexcept { return pending_items_.load(std::memory_order_relaxed); }

private:
    void start_burst(time_point now) DU_REQUIRES(mutex_) {
        burst_ = burst_report{};
        burst_started_ = now;
    }

    void complete_locked(time_point when) DU_REQUIRES(mutex_) {
        ++stats_.items_reclaimed;
        if (pending_items_.fetch_sub(1, std::memory_order_relaxed) != 1) return;
        burst_.duration = std::chrono::duration_cast<std::chrono::nanoseconds>(when - burst_started_);
        stats_.last_burst = burst_;
        ++stats_.bursts;
        burst_ended_ = when;
    }

    const std::chrono::nanoseconds max_delay_;

    mutable mutex mutex_;
    ring<reclaim_item> items_ DU_GUARDED_BY(mutex_);
    std::size_t in_flight_ DU_GUARDED_BY(mutex_) = 0;  // popped, not done: the current item and a set-aside close
    time_point last_drain_ DU_GUARDED_BY(mutex_){};
    time_point waiting_since_ DU_GUARDED_BY(mutex_){};  // when a push found nothing waiting for a drain
    time_point burst_started_ DU_GUARDED_BY(mutex_){};
    time_point burst_ended_ DU_GUARDED_BY(mutex_){};
    burst_report burst_ DU_GUARDED_BY(mutex_);
    reclaim_stats stats_ DU_GUARDED_BY(mutex_);
    cost_model model_ DU_GUARDED_BY(mutex_);

    // Written under mutex_, read without it: the O(1) queries and the worker's wait predicate.
    std::atomic<std::size_t> pending_bytes_{0};
    std::atomic<std::size_t> pending_items_{0};
    std::atomic<std::size_t> waiting_items_{0};  // items_ and in_flight_ together
    std::atomic<bool> handed_over_{false};
};

}  // namespace deferred_unmap::detail

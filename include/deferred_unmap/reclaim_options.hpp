// deferred_unmap/reclaim_options.hpp - how a reclaim_queue is set up, and the check it makes.
//
// Guarantees: validate() accepts exactly the options a queue's constructor accepts; a queue built
// from options validate() refused throws std::system_error (EINVAL), so a host built without
// exceptions checks first. Plain data, copyable.
//
//   deferred_unmap::reclaim_options options;               // close_on_worker: the recommended mode
//   options.prior.unmap_ns_per_byte = 0.012;                // a tuned desktop: its own measured rates
//   if (auto ec = deferred_unmap::validate(options)) log("bad options: %s", ec.message().c_str());
//   deferred_unmap::reclaim_queue queue{std::move(options)};
#pragma once

#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <system_error>

#include "cost_model.hpp"
#include "stats.hpp"

namespace deferred_unmap {

/// The longest reclaim_options::worker_pause a queue accepts: 10 ms, more than a frame at 100 Hz.
inline constexpr std::chrono::nanoseconds max_worker_pause = std::chrono::milliseconds{10};

struct reclaim_options {
    /// Largest munmap per step, rounded up to whole pages: a cap for when the model is wrong, since
    /// max_step sizes the steps (by default a pool's first step is about 1.3 MiB and its later ones at
    /// most twice that). Each cut costs CPU (2 MiB steps ~8% more in total than one
    /// munmap of a 19.8 MiB pool, 512 KiB ~30%).
    std::size_t unmap_chunk_bytes = std::size_t{64} << 20;
    /// Longest a munmap step is predicted to take (and so to hold mmap_lock). Pools differ (one the
    /// compositor read has page tables to clear, one it never read has none), so each pool's first step
    /// is sized at the cautious rate R = max(first_step_ns_per_byte, the learned
    /// unmap_ns_per_byte_high(max_step_deviations)), and its later steps at the rate of its own last
    /// step (as many deviations high), but never past twice the first: however many cheap pools taught the
    /// model, no step of a dear one runs far past max_step. A step takes min(unmap_chunk_bytes, what is
    /// left) where that fits; otherwise what is left is cut evenly into the fewest whole-page steps that
    /// fit, at least one page each, so a slow machine cuts its steps finer and, unless unmap_chunk_bytes
    /// is what binds, none is a sliver. 200 us is what one munmap of a whole 19.8 MiB pool took on the
    /// original report's desktop. Must be > 0.
    std::chrono::nanoseconds max_step = std::chrono::microseconds{200};
    /// How slow a call max_step leaves room for, in learned deviations of the munmap rate: at 2, steps
    /// are sized for a call slower than most (for a normal spread, about one in twenty is slower):
    /// on a 2-vCPU VM 4-10% of steps ran past max_step, against 13-31% sized by the mean (0).
    /// A pool's first step is predicted at the rate it is sized at (see first_step_ns_per_byte), its
    /// later ones at its own rate, a close at the mean. Must be finite and >= 0.
    double max_step_deviations = 2.0;
    /// The munmap rate, in ns a byte, every pool's first step is sized and predicted at unless the
    /// model learned a slower one (see max_step). Not learned and not part of the prior, so neither a
    /// run of cheap pools nor a prior carried over from them can lower it. 0.15: a read 64 MiB memfd
    /// pool unmapped at 0.12-0.16 ns a byte (wall clock) on a 2-vCPU VM (examples/03_mixed_pools,
    /// docs/benchmarks.md). A pool dearer than this runs its first step past max_step by the ratio;
    /// a value near 0 leaves the first step to the learned rate alone. A host that measured its
    /// machine's read pools sets their rate here. Must be finite and > 0.
    double first_step_ns_per_byte = 0.15;
    /// Hard cap on mapped bytes waiting; a push beyond it reclaims the oldest at once until it fits.
    std::size_t max_pending_bytes = std::numeric_limits<std::size_t>::max();
    /// Hard cap on items waiting for the queue's own steps; a push beyond it reclaims the oldest at
    /// once, as max_pending_bytes does (with close_on_worker the pushing thread makes their munmaps and
    /// the worker their closes). Each waiting item holds a mapping and maybe a descriptor: a client
    /// churning small pools must not take the process to vm.max_map_count (65,530 by default). 16,384
    /// is a quarter of that. Closes already handed to the worker are not counted: their descriptors
    /// wait only for the worker, which makes them as they come, but on a saturated CPU it may fall
    /// behind (709 descriptors held with a cap of 16 and closes of 1 ms each, in review), so the cap
    /// bounds mappings, not descriptors. Must be > 0.
    std::size_t max_pending_items = 16384;
    /// How long work may wait without a drain; see next_deadline(). A negative value counts as zero.
    std::chrono::nanoseconds max_delay = std::chrono::milliseconds{100};
    /// A worker thread makes the close() calls after drain has unmapped; drain's budget covers munmap
    /// only. The default: the frame thread keeps every mmap_lock hold short and its own, and the larger
    /// part of the work (close frees the pages, with no mmap_lock) leaves it.
    bool close_on_worker = true;
    /// The worker makes every call, one chunk at a time with worker_pause between chunks; drain only
    /// hands work over. Implies a worker.
    bool unmap_on_worker = false;
    /// With close_on_worker alone, the worker runs at nice 10 (Linux; elsewhere ignored): it takes no
    /// mmap_lock, so however late it runs it cannot make the frame thread's mmap() wait. It still shares
    /// the queue's short bookkeeping locks, so on a saturated CPU a push or drain may wait a scheduling
    /// period behind it (SCHED_IDLE made that a second; hence a nice value), and flush(), the
    /// destructor and a push the queue cannot grow for wait for its closes. Ignored with
    /// unmap_on_worker: a worker preempted while it holds mmap_lock would stall the host's own mmap and
    /// munmap calls behind it, so the unmapping worker keeps the creating thread's nice value. Every
    /// worker runs SCHED_OTHER: from a SCHED_RR or SCHED_FIFO frame thread, an unmapping worker can be
    /// preempted holding the lock, which is one more reason the default unmaps on the draining thread.
    bool low_priority_closes = false;
    /// Gap the worker leaves between munmap chunks, so a waiting mmap() gets the lock. From 0 to
    /// max_worker_pause: a waiter needs microseconds, and a longer gap only leaves memory mapped longer.
    std::chrono::nanoseconds worker_pause = std::chrono::microseconds{100};
    /// Where the cost model starts. Must be valid(): finite, non-negative.
    cost_model prior{};
    /// Items reserved up front, so pushes allocate nothing until a burst exceeds it.
    std::size_t initial_capacity = 64;
    /// Called for each failed munmap/close, on the thread that made the call (possibly two at once).
    /// Must be thread-safe; must not throw into the queue or call back into it.
    std::function<void(const reclaim_error&)> on_error{};
    /// Sleep a drain or drain_until takes between two munmap steps, from its budget, so a thread that
    /// waited for mmap_lock (an mmap, munmap or mprotect, or a page fault the per-VMA locks do not
    /// serve) gets it before the next step: the kernel wakes a waiter when the lock is released, but
    /// a running thread that asks again at once takes it first, until the rwsem hands off (after ~4 ms
    /// at HZ=250), so without a pause a waiter may wait for the whole drain. A sleep runs longer than
    /// asked (timer slack, wake-up): the drain budgets what its sleeps have taken. The step lock is
    /// held through it, so a flush or another drain waits for it too. Zero (the default): steps run
    /// back to back. Not taken by flush, by a push over the cap, or with unmap_on_worker (the worker
    /// has worker_pause). Must be >= 0. Needs an Os with pause().
    std::chrono::nanoseconds drain_pause = std::chrono::nanoseconds::zero();
};

namespace detail {
// One rule per checked field: validate() and a queue built without exceptions share them.
inline bool valid_max_step(std::chrono::nanoseconds step) noexcept { return step > std::chrono::nanoseconds::zero(); }
inline bool valid_step_deviations(double k) noexcept { return std::isfinite(k) && k >= 0.0; }
inline bool valid_first_step_rate(double rate) noexcept { return std::isfinite(rate) && rate > 0.0; }
inline bool valid_drain_pause(std::chrono::nanoseconds pause) noexcept { return pause >= std::chrono::nanoseconds::zero(); }
inline bool valid_worker_pause(std::chrono::nanoseconds pause) noexcept {
    return pause >= std::chrono::nanoseconds::zero() && pause <= max_worker_pause;
}
inline bool valid_max_pending_items(std::size_t items) noexcept { return items > 0; }
}  // namespace detail

/// Empty when a queue accepts `options`; std::errc::invalid_argument when the prior is not valid()
/// (negative, NaN or infinite), max_step is not positive, max_step_deviations is negative, NaN or
/// infinite, first_step_ns_per_byte is not positive or not finite, drain_pause is negative,
/// worker_pause lies outside 0..max_worker_pause, or max_pending_items is 0. O(1), no allocation.
[[nodiscard]] inline std::error_code validate(const reclaim_options& options) noexcept {
    const bool valid = options.prior.valid() && detail::valid_max_step(options.max_step) &&
                       detail::valid_step_deviations(options.max_step_deviations) &&
                       detail::valid_first_step_rate(options.first_step_ns_per_byte) &&
                       detail::valid_drain_pause(options.drain_pause) && detail::valid_worker_pause(options.worker_pause) &&
                       detail::valid_max_pending_items(options.max_pending_items);
    return valid ? std::error_code{} : std::make_error_code(std::errc::invalid_argument);
}

}  // namespace deferred_unmap

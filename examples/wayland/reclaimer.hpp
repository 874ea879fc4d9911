// reclaimer.hpp - where shm_compositor sends the pools and pool views clients are done with.
//
// One interface over the five ways a compositor can tear a pool down, so the same server can be
// measured with each: close-first (the fd first, then munmap frees every page as it returns, as
// libwayland's own wl_shm and KWin do), unmap-first (the same, in the right order), and three
// deferred_unmap queues drained from the frame-commit hook. Main thread only.
#pragma once

#include <deferred_unmap/deferred_unmap.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

namespace shm_compositor {

enum class reclaim_mode { close_first, unmap_first, queue, queue_worker, queue_worker_unmap };

/// "close-first", "unmap-first", "queue", "queue+worker" or "queue+worker-unmap"; nullopt otherwise.
std::optional<reclaim_mode> parse_mode(std::string_view name);
std::string_view mode_name(reclaim_mode mode);

/// What the compositor thread spent on teardown, and what was torn down.
struct reclaim_summary {
    std::uint64_t pools_retired = 0;     ///< pools handed over (destroyed, last buffer gone)
    std::uint64_t views_retired = 0;     ///< old mappings handed over by wl_shm_pool.resize
    std::uint64_t items_reclaimed = 0;   ///< pools and views fully torn down
    std::uint64_t bytes_reclaimed = 0;   ///< bytes unmapped
    std::uint64_t teardown_errors = 0;   ///< failed munmap/close calls
    std::size_t max_pending_bytes = 0;   ///< the most mapped bytes ever waiting (0 when immediate)
    /// Per frame (or idle wakeup) that had teardown to do: time the compositor thread spent on it. For
    /// the immediate modes, the teardowns made inline by request handlers since the previous frame.
    deferred_unmap::duration_histogram drains;
    /// Each munmap/close made on the compositor thread by the queue (queue modes): a drain overshoots its
    /// budget by at most one of these, plus whatever preempts the thread.
    deferred_unmap::duration_histogram steps;
    std::chrono::nanoseconds worker_step_max{0};
    deferred_unmap::cost_model model{};  ///< as the queue learned it (queue modes)
};

class reclaimer {
public:
    using clock = std::chrono::steady_clock;

    /// `max_delay`: how long queued work may wait for a frame before the idle timer drains it.
    reclaimer(reclaim_mode mode, std::chrono::nanoseconds max_delay);

    [[nodiscard]] reclaim_mode mode() const noexcept { return mode_; }

    /// Called after each retire, so the owner can arm its idle timer. Not called from teardown.
    void on_retire(std::function<void()> callback) { on_retire_ = std::move(callback); }

    /// A pool nothing uses any more. Immediate modes tear it down here; queue modes push it (O(1)).
    void retire(deferred_unmap::shm_region&& pool) noexcept;
    /// The view a resize replaced. Same costs as retire(shm_region&&).
    void retire(deferred_unmap::mapping&& old_view) noexcept;

    /// The frame-commit hook: drains up to `budget` (queue modes). Records the frame's teardown time.
    void on_frame(std::chrono::nanoseconds budget) noexcept;
    /// The idle timer fired: drains up to `budget`.
    void on_idle(std::chrono::nanoseconds budget) noexcept;

    /// When on_idle() is due; time_point::max() when nothing waits.
    [[nodiscard]] clock::time_point next_deadline() const noexcept;
    [[nodiscard]] std::size_t pending_items() const noexcept;

    /// Tears everything left down now (exit). May block for the whole teardown.
    void flush() noexcept;

    [[nodiscard]] reclaim_summary summary() const noexcept;

private:
    void tear_down_now(deferred_unmap::shm_region&& pool) noexcept;
    void drain_and_record(std::chrono::nanoseconds budget) noexcept;
    void retired() noexcept;

    reclaim_mode mode_;
    std::optional<deferred_unmap::reclaim_queue> queue_;  // queue modes only
    reclaim_summary immediate_;                          // immediate modes' counts, and every mode's drains
    std::chrono::nanoseconds inline_since_frame_{0};
    std::function<void()> on_retire_;
};

}  // namespace shm_compositor

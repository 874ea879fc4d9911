// frame_loop.hpp - the headless output's refresh cycle, and where the reclaimer drains.
//
// The output has a vblank every 1/hz (a periodic timerfd). At a vblank, if a commit asked for a
// repaint: repaint the scene, then drain the reclaimer within the budget (the frame-commit hook).
// A second timer, armed from the reclaimer's next_deadline(), drains when no frame is drawn, then
// a frame period after each of its drains while work waits for one.
// Every vblank the loop was too busy to see (a stall in a request handler, a long drain) is a missed
// frame, whether or not anything was to be drawn: a real output would have shown a stale picture and
// frozen the cursor. A frame's time runs from the oldest vblank it was due at to the end of its work.
// Main thread only.
#pragma once

#include <chrono>
#include <cstdint>

#include <wayland-server-core.h>

#include <deferred_unmap/stats.hpp>

#include "reclaimer.hpp"
#include "surfaces.hpp"

namespace shm_compositor {

struct frame_stats {
    std::uint64_t frames = 0;
    std::uint64_t missed_frames = 0;  ///< vblanks passed while the loop was busy
    std::uint64_t idle_drains = 0;
    deferred_unmap::duration_histogram frame_times;  ///< oldest due vblank to end of repaint + drain
};

class frame_loop {
public:
    using clock = std::chrono::steady_clock;

    /// Throws std::system_error if the timers cannot be made.
    frame_loop(wl_event_loop* loop, scene& scene, reclaimer& reclaim, int hz, std::chrono::nanoseconds budget);
    ~frame_loop();
    frame_loop(const frame_loop&) = delete;
    frame_loop& operator=(const frame_loop&) = delete;

    /// Repaints at the next vblank. Cost: none.
    void schedule_repaint() noexcept { repaint_needed_ = true; }
    /// Arms the idle timer from the reclaimer's deadline, `latest` at the latest (disarms it when
    /// nothing waits).
    void arm_idle_timer(clock::time_point latest = clock::time_point::max()) noexcept;

    [[nodiscard]] const frame_stats& stats() const noexcept { return stats_; }
    [[nodiscard]] std::chrono::nanoseconds period() const noexcept { return period_; }

private:
    static int on_vblank(int fd, std::uint32_t mask, void* data);
    static int on_idle(void* data);
    void run_vblank(std::uint64_t expirations) noexcept;
    void release() noexcept;
    [[nodiscard]] clock::time_point last_vblank(clock::time_point now) const noexcept;

    scene& scene_;
    reclaimer& reclaim_;
    std::chrono::nanoseconds period_;
    std::chrono::nanoseconds budget_;
    clock::time_point epoch_;
    bool repaint_needed_ = false;
    int vblank_fd_ = -1;
    wl_event_source* vblank_source_ = nullptr;
    wl_event_source* idle_source_ = nullptr;
    frame_stats stats_;
};

}  // namespace shm_compositor

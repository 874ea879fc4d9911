// frame_loop.cpp - vblank timer (periodic timerfd), repaint, drain; idle timer for when nothing is drawn.
#include "frame_loop.hpp"

#include <algorithm>
#include <cerrno>
#include <system_error>

#include <sys/timerfd.h>
#include <unistd.h>

namespace shm_compositor {

using std::chrono::nanoseconds;

namespace {

timespec to_timespec(nanoseconds d) noexcept {
    const auto ns = d.count();
    return {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

// steady_clock is CLOCK_MONOTONIC on Linux, so its time points can arm a CLOCK_MONOTONIC timerfd.
timespec to_timespec(frame_loop::clock::time_point t) noexcept { return to_timespec(t.time_since_epoch()); }

std::uint32_t monotonic_ms(frame_loop::clock::time_point t) noexcept {
    return static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}

}  // namespace

frame_loop::frame_loop(wl_event_loop* loop, scene& scene, reclaimer& reclaim, int hz, nanoseconds budget)
    : scene_(scene), reclaim_(reclaim), period_(nanoseconds{1'000'000'000} / hz), budget_(budget), epoch_(clock::now()) {
    vblank_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (vblank_fd_ < 0) throw std::system_error(errno, std::system_category(), "timerfd_create");
    vblank_source_ = wl_event_loop_add_fd(loop, vblank_fd_, WL_EVENT_READABLE, on_vblank, this);
    idle_source_ = wl_event_loop_add_timer(loop, on_idle, this);
    if (vblank_source_ == nullptr || idle_source_ == nullptr) {
        release();
        throw std::system_error(ENOMEM, std::system_category(), "wl_event_loop_add_*");
    }
    const itimerspec spec{to_timespec(period_), to_timespec(epoch_ + period_)};  // every vblank from now on
    if (::timerfd_settime(vblank_fd_, TFD_TIMER_ABSTIME, &spec, nullptr) != 0) {
        const int error = errno;
        release();
        throw std::system_error(error, std::system_category(), "timerfd_settime");
    }
}

frame_loop::~frame_loop() { release(); }

void frame_loop::release() noexcept {
    if (idle_source_ != nullptr) wl_event_source_remove(idle_source_);
    if (vblank_source_ != nullptr) wl_event_source_remove(vblank_source_);
    if (vblank_fd_ >= 0) ::close(vblank_fd_);
    idle_source_ = vblank_source_ = nullptr;
    vblank_fd_ = -1;
}

frame_loop::clock::time_point frame_loop::last_vblank(clock::time_point now) const noexcept {
    return epoch_ + (now - epoch_) / period_ * period_;
}

int frame_loop::on_vblank(int fd, std::uint32_t, void* data) {
    std::uint64_t expirations = 0;
    if (::read(fd, &expirations, sizeof expirations) != sizeof expirations) return 0;
    static_cast<frame_loop*>(data)->run_vblank(expirations);
    return 0;
}

// Repaint, then the frame-commit hook: the page flip would be queued here, and teardown gets the rest
// of the budget.
void frame_loop::run_vblank(std::uint64_t expirations) noexcept {
    stats_.missed_frames += expirations - 1;
    if (!repaint_needed_) return;
    const auto due = last_vblank(clock::now()) - static_cast<clock::rep>(expirations - 1) * period_;
    repaint_needed_ = false;
    scene_.repaint(monotonic_ms(clock::now()));
    reclaim_.on_frame(budget_);
    ++stats_.frames;
    stats_.frame_times.record(std::chrono::duration_cast<nanoseconds>(clock::now() - due));
    arm_idle_timer();
}

void frame_loop::arm_idle_timer(clock::time_point latest) noexcept {
    // Nothing waits for a drain (the queue is empty, or the worker has the rest): no timer at all.
    const auto due = reclaim_.next_deadline();
    if (due == clock::time_point::max()) {
        wl_event_source_timer_update(idle_source_, 0);
        return;
    }
    const auto deadline = std::min(due, latest);
    // wl_event_source_timer_update takes whole milliseconds, and 0 would disarm it.
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
    wl_event_source_timer_update(idle_source_, static_cast<int>(std::max<decltype(wait)>(wait, 1)));
}

int frame_loop::on_idle(void* data) {
    auto* self = static_cast<frame_loop*>(data);
    ++self->stats_.idle_drains;
    // A frame's slice at a frame's pace while work waits for a drain: a longer slice would be a
    // stretch of teardown that input and the next frame wait out.
    self->reclaim_.on_idle(self->budget_);
    self->arm_idle_timer(clock::now() + self->period_);
    return 0;
}

}  // namespace shm_compositor

// 02_frame_hook: the integration a compositor makes, in one file.
//
// Pools die when clients destroy them (push), teardown happens after each frame commit (drain), a
// timerfd armed from next_deadline() gives memory back while the screen is idle (no frames at all), and
// the worker's descriptor says when the closes handed to it are done. The loop ends in every mode.
#include <deferred_unmap/deferred_unmap.hpp>

#include <poll.h>
#include <sys/mman.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <system_error>

namespace du = deferred_unmap;
using namespace std::chrono_literals;

namespace {

constexpr auto frame_period = 16ms;

du::shm_region client_pool(std::size_t bytes) {
    du::unique_fd fd{::memfd_create("wl_shm", MFD_CLOEXEC)};
    if (!fd || ::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
        throw std::system_error(errno, std::system_category(), "memfd");
    auto view = du::mapping::map(fd.get(), bytes, PROT_READ, MAP_SHARED);
    return du::shm_region{std::move(fd), std::move(view)};
}

// Arms `timer` (a CLOCK_MONOTONIC timerfd, like steady_clock on Linux) for `deadline`.
void arm_idle_timer(int timer, du::reclaim_queue::time_point deadline) {
    itimerspec spec{};
    if (deadline != du::reclaim_queue::time_point::max()) {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
        spec.it_value = {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    }
    ::timerfd_settime(timer, TFD_TIMER_ABSTIME, &spec, nullptr);  // all zero: disarm
}

}  // namespace

int main() {
    du::reclaim_queue queue{{.max_delay = 50ms}};  // the default mode: closes on the worker
    du::unique_fd timer{::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC)};

    // A client destroys 8 pools of 4 MiB: the compositor's wl_shm_pool destroy handler pushes each.
    for (int i = 0; i < 8; ++i) queue.push(client_pool(std::size_t{4} << 20));
    std::printf("pushed: %zu pools, %zu MiB waiting\n", queue.pending_items(), queue.pending_bytes() >> 20);

    // Two frames are committed: each frame-commit hook spends at most ~0.2 ms on teardown.
    for (int frame = 0; frame < 2; ++frame) {
        const auto report = queue.drain(200us);
        std::printf("frame %d: %s\n", frame, report.steps + report.fds_handed_off > 0 ? "made progress" : "nothing left to do");
    }

    // Then the screen goes idle: no frames, so the deadline timer and the worker's descriptor drive the
    // rest. Clear the descriptor before looking at the queue, so no wakeup is lost.
    int wakeups = 0;
    auto paced = du::reclaim_queue::time_point::max();  // after an idle drain: one frame period on
    for (queue.clear_worker_done(); !queue.empty(); queue.clear_worker_done()) {
        arm_idle_timer(timer.get(), std::min(queue.next_deadline(), paced));
        pollfd fds[2] = {{timer.get(), POLLIN, 0}, {queue.worker_done_fd(), POLLIN, 0}};
        ::poll(fds, queue.worker_done_fd() >= 0 ? 2 : 1, -1);
        std::uint64_t expirations = 0;
        if ((fds[0].revents & POLLIN) != 0 && ::read(timer.get(), &expirations, sizeof expirations) > 0) {
            // Idle: a frame's slice at a frame's pace, so input never waits out a longer stretch.
            queue.drain(200us);
            const bool waits = queue.next_deadline() != du::reclaim_queue::time_point::max();
            paced = waits ? du::reclaim_queue::clock::now() + frame_period : du::reclaim_queue::time_point::max();
        }
        ++wakeups;
    }
    std::printf("idle: everything reclaimed after %s timer wakeups\n", wakeups > 0 ? "a few" : "no");
    std::printf("stats: %llu pools, %llu MiB unmapped, %llu fds closed, %llu errors\n",
                static_cast<unsigned long long>(queue.stats().items_reclaimed),
                static_cast<unsigned long long>(queue.stats().bytes_unmapped >> 20),
                static_cast<unsigned long long>(queue.stats().fds_closed),
                static_cast<unsigned long long>(queue.stats().unmap_errors + queue.stats().close_errors));
}

// Expected output:
//   pushed: 8 pools, 32 MiB waiting
//   frame 0: made progress
//   frame 1: made progress (or "nothing left to do" where the first frame's slice covered it all)
//   idle: everything reclaimed after a few timer wakeups
//   stats: 8 pools, 32 MiB unmapped, 8 fds closed, 0 errors

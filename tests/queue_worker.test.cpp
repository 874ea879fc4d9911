#include <doctest/doctest.h>

#include "test_support.hpp"

#include <poll.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

using namespace du_test;
using namespace std::chrono_literals;

TEST_CASE("queue: with close_on_worker, drain unmaps and the worker closes") {
    auto& os = dt::reset();
    const auto me = std::this_thread::get_id();
    // munmap ~0.1 ns/B; a close made on the draining thread would cost 3 ms and break every budget.
    // The worker's calls cost nothing on the manual clock, so drain's timing stays exact.
    os.cost = [me](const dt::os_call& c) {
        if (c.thread != me) return std::chrono::nanoseconds{0};
        if (c.op == call_kind::close) return std::chrono::nanoseconds{3ms};
        return std::chrono::nanoseconds{static_cast<std::int64_t>(0.1 * static_cast<double>(c.length))};
    };
    std::vector<int> fds;
    {
        scripted_queue q{two_mib_steps({.close_on_worker = true})};
        for (int i = 0; i < 8; ++i) {
            auto region = dt::make_region(3 * mib);
            fds.push_back(region.fd());
            q.push(std::move(region));
        }
        std::size_t handed_off = 0;
        std::size_t drains = 0;
        while (q.pending_bytes() > 0) {
            const auto report = q.drain(1ms);
            CHECK(report.fds_closed == 0);
            CHECK(report.elapsed <= 1ms + 210us);  // the budget plus at most one 2 MiB munmap
            handed_off += report.fds_handed_off;
            ++drains;
        }
        CHECK(drains >= 3);  // 24 MiB of munmap at ~0.1 ns/B does not fit one 1 ms drain
        handed_off += q.drain(1ms).fds_handed_off;  // the last item's close
        CHECK(handed_off == 8);
        q.flush();
        CHECK(q.empty());
        CHECK(q.stats().fds_closed == 8);
        CHECK(q.stats().worker_steps == 8);
    }
    for (const auto& c : dt::script().calls()) {
        if (c.op == call_kind::unmap) CHECK(c.thread == me);
        if (c.op == call_kind::close) CHECK(c.thread != me);
    }
    CHECK(dt::script().open_fds() == 0);
    CHECK(dt::script().misuse() == 0);
}

TEST_CASE("queue: with close_on_worker, a close is handed off only after its pool is unmapped") {
    dt::reset();
    scripted_queue q{two_mib_steps({.close_on_worker = true})};
    auto region = dt::make_region(6 * mib);
    const int fd = region.fd();
    q.push(std::move(region));
    for (int frame = 0; frame < 2; ++frame) {
        const auto report = q.drain(1ns);  // one 2 MiB munmap per drain
        CHECK(report.fds_handed_off == 0);
        CHECK(dt::script().is_open(fd));
    }
    CHECK(q.drain(1ns).fds_handed_off == 1);  // the last munmap, then the close goes to the worker
    REQUIRE(q.wait_for_worker(10s));
    CHECK(q.stats().worker_steps == 1);
    const auto calls = dt::script().calls();
    std::size_t unmaps_before_close = 0;
    for (const auto& c : calls) {
        if (c.op == call_kind::close) {
            CHECK(c.fd == fd);
            CHECK(c.thread != std::this_thread::get_id());
            break;
        }
        if (c.op == call_kind::unmap) ++unmaps_before_close;
    }
    CHECK(unmaps_before_close == 3);
}

TEST_CASE("queue: with close_on_worker, a drain whose budget is spent hands off no further descriptors") {
    dt::reset().unmap_ns_per_byte = 1.0;  // the region's one 2 MiB munmap: ~2.1 ms, over the budget
    scripted_queue q{{.max_step = 10ms, .close_on_worker = true}};  // one step for the whole region
    q.push(dt::make_region(2 * mib));
    for (int i = 0; i < 5; ++i) q.push(dt::scripted_fd{dt::script().open_fd()});
    const auto report = q.drain(1ms);
    CHECK(report.steps == 1);
    CHECK(report.fds_handed_off == 1);  // the region's own close; the bare fds wait for the next drain
    CHECK(q.drain(1ms).fds_handed_off == 5);
    q.flush();
    CHECK(dt::script().open_fds() == 0);
    CHECK(dt::script().misuse() == 0);
}

TEST_CASE("queue: with unmap_on_worker, the draining thread makes no teardown call") {
    dt::reset();
    {
        scripted_queue q{{.unmap_on_worker = true, .worker_pause = 0ns}};
        for (int i = 0; i < 6; ++i) q.push(dt::make_region(5 * mib));
        const auto report = q.drain(1ms);
        CHECK(report.steps == 0);
        q.flush();  // waits for the worker, or finishes what it has not reached
        CHECK(q.empty());
        CHECK(q.pending_bytes() == 0);
    }
    CHECK(dt::script().open_fds() == 0);
    CHECK(dt::script().mapped_bytes() == 0);
    CHECK(dt::script().misuse() == 0);
}

TEST_CASE("queue: with unmap_on_worker, the worker reclaims everything once drain releases it") {
    dt::reset();
    scripted_queue q{two_mib_steps({.unmap_on_worker = true, .worker_pause = 0ns})};
    for (int i = 0; i < 6; ++i) q.push(dt::make_region(5 * mib));
    CHECK(q.drain(0ns).steps == 0);
    std::this_thread::sleep_for(5ms);
    CHECK(dt::script().count(call_kind::unmap) == 0);  // nothing happens before drain releases the work
    q.drain(1ms);
    for (int spins = 0; spins < 10000 && !q.empty(); ++spins) std::this_thread::sleep_for(1ms);
    CHECK(q.empty());
    const auto me = std::this_thread::get_id();
    for (const auto& c : dt::script().calls())
        if (c.op != call_kind::map) CHECK(c.thread != me);
    CHECK(q.stats().worker_steps == 6 * 4);
}

TEST_CASE("queue: with unmap_on_worker, work the worker holds is no drain's business") {
    dt::reset();
    std::atomic<bool> hold{true};
    dt::script().fail = [&hold](const dt::os_call& c) {
        while (c.op == call_kind::unmap && hold.load()) std::this_thread::sleep_for(50us);  // the worker waits in its first munmap
        return 0;
    };
    scripted_queue q{{.max_delay = 50ms, .unmap_on_worker = true, .worker_pause = 0ns}};
    q.push(dt::make_region(8 * mib));
    dt::manual_clock::advance(80ms);  // overdue: no frame came
    REQUIRE(q.next_deadline() < dt::manual_clock::now());
    q.drain(1ms);
    // The worker has it all: an idle timer armed from the deadline stays disarmed, and the host learns
    // that the worker is done from worker_done_fd() instead.
    CHECK(q.next_deadline() == dt::manual_clock::time_point::max());
    CHECK_FALSE(q.empty());
    pollfd done{q.worker_done_fd(), POLLIN, 0};
    CHECK(::poll(&done, 1, 0) == 0);
    hold = false;
    CHECK(::poll(&done, 1, 10000) == 1);
    q.clear_worker_done();
    CHECK(q.empty());
    CHECK(::poll(&done, 1, 0) == 0);
}

TEST_CASE("queue: pushes from many threads while one thread drains lose nothing") {
    dt::reset();
    scripted_queue q{{.close_on_worker = true}};
    constexpr int threads = 4;
    constexpr int per_thread = 200;
    std::atomic<bool> done{false};
    std::vector<std::jthread> pushers;
    for (int t = 0; t < threads; ++t)
        pushers.emplace_back([&q] {
            for (int i = 0; i < per_thread; ++i) q.push(dt::make_region(64 * 1024));
        });
    std::jthread drainer([&q, &done] {
        while (!done.load()) q.drain(100us);
    });
    pushers.clear();
    done = true;
    drainer.join();
    q.flush();
    const auto s = q.stats();
    CHECK(s.items_pushed == threads * per_thread);
    CHECK(s.items_reclaimed == threads * per_thread);
    CHECK(dt::script().open_fds() == 0);
    CHECK(dt::script().mapped_bytes() == 0);
    CHECK(dt::script().misuse() == 0);
}

TEST_CASE("queue: with close_on_worker, a flush closes nothing before the closes the worker still holds") {
    auto& os = dt::reset();
    const int stuck_fd = os.open_fd();
    os.fail = [stuck_fd](const dt::os_call& c) { return c.op == call_kind::close && c.fd == stuck_fd ? EIO : 0; };
    std::atomic<bool> stuck{false};
    std::atomic<bool> release{false};
    du::reclaim_options options{.close_on_worker = true};
    options.on_error = [&](const du::reclaim_error&) {  // holds the worker inside the first close
        stuck = true;
        while (!release) std::this_thread::yield();
    };
    scripted_queue q{std::move(options)};
    auto older = dt::make_region(mib);  // opened before the stuck close releases its number
    const int older_fd = older.fd();
    q.push(dt::scripted_fd{stuck_fd});
    CHECK(q.drain(1s).fds_handed_off == 1);
    for (int i = 0; i < 10000 && !stuck; ++i) std::this_thread::sleep_for(1ms);
    REQUIRE(stuck);
    q.push(std::move(older));
    CHECK(q.drain(1s).fds_handed_off == 1);  // waits in the worker's ring behind the stuck close
    auto newer = dt::make_region(mib);
    const int newer_fd = newer.fd();
    q.push(std::move(newer));
    std::thread flusher([&] { q.flush(); });
    // Time enough for a flush that closed on its own thread to close the newer pool first.
    for (int i = 0; i < 200 && os.is_open(newer_fd); ++i) std::this_thread::sleep_for(1ms);
    release = true;
    flusher.join();
    std::vector<int> closed;
    for (const auto& c : os.calls())
        if (c.op == call_kind::close) closed.push_back(c.fd);
    CHECK(closed == std::vector<int>{stuck_fd, older_fd, newer_fd});
    CHECK(q.empty());
    CHECK(os.open_fds() == 0);
    CHECK(os.misuse() == 0);
}

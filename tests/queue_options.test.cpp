#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

using namespace du_test;
using namespace std::chrono_literals;

TEST_CASE("queue: a push beyond max_pending_bytes reclaims the oldest until it fits") {
    dt::reset();
    scripted_queue q{inline_mode(two_mib_steps({.max_pending_bytes = 9 * mib}))};
    auto a = dt::make_region(4 * mib);
    const void* oldest = a.data();
    q.push(std::move(a));
    q.push(dt::make_region(4 * mib));
    CHECK(dt::script().count(call_kind::unmap) == 0);
    q.push(dt::make_region(4 * mib));  // 12 MiB > 9 MiB: the oldest goes, now
    CHECK(q.pending_bytes() == 8 * mib);
    const auto calls = dt::script().calls();
    CHECK(dt::script().count(call_kind::unmap) == 2);
    for (const auto& c : calls)
        if (c.op == call_kind::unmap) CHECK(static_cast<const std::byte*>(c.addr) < static_cast<const std::byte*>(oldest) + 4 * mib);
    CHECK(q.stats().cap_steps == 2);
    CHECK(q.pending_items() == 3);  // the oldest still waits for its close, which frees no address space
}

TEST_CASE("queue: an item larger than max_pending_bytes is reclaimed at once") {
    dt::reset();
    scripted_queue q{inline_mode({.max_pending_bytes = mib})};
    q.push(dt::make_region(6 * mib));
    CHECK(q.pending_bytes() == 0);
    CHECK(dt::script().mapped_bytes() == 0);
    q.drain(1ms);
    CHECK(q.empty());
}

TEST_CASE("queue: next_deadline is max when empty, then max_delay after the oldest push") {
    dt::reset();
    scripted_queue q{inline_mode({.max_delay = 50ms})};
    CHECK(q.next_deadline() == dt::manual_clock::time_point::max());
    const auto pushed_at = dt::manual_clock::now();
    q.push(dt::make_region(8 * mib));
    dt::manual_clock::advance(10ms);
    q.push(dt::make_region(8 * mib));
    CHECK(q.next_deadline() == pushed_at + 50ms);
}

TEST_CASE("queue: next_deadline starts again from the first push after the queue emptied") {
    dt::reset();
    scripted_queue q{inline_mode({.max_delay = 50ms})};
    q.push(dt::make_region(8 * mib));
    q.flush();
    dt::manual_clock::advance(200ms);
    const auto pushed_at = dt::manual_clock::now();
    q.push(dt::make_region(8 * mib));
    dt::manual_clock::advance(10ms);
    q.push(dt::make_region(8 * mib));
    CHECK(q.next_deadline() == pushed_at + 50ms);
}

TEST_CASE("queue: a negative max_delay counts as zero, so the deadline never falls before the last drain") {
    dt::reset().unmap_ns_per_byte = 0.05;
    scripted_queue q{inline_mode({.max_delay = -5ms})};
    CHECK(q.options().max_delay == 0ns);
    q.push(dt::make_region(20 * mib));
    dt::manual_clock::advance(10ms);
    const auto drained_at = dt::manual_clock::now();
    q.drain(1ms);
    REQUIRE_FALSE(q.empty());
    CHECK(q.next_deadline() == drained_at);
}

TEST_CASE("queue: a drain moves next_deadline to max_delay after it") {
    dt::reset().unmap_ns_per_byte = 0.05;
    scripted_queue q{inline_mode({.max_delay = 50ms})};
    q.push(dt::make_region(20 * mib));
    dt::manual_clock::advance(80ms);  // overdue: no frame came
    const auto drained_at = dt::manual_clock::now();
    CHECK(q.next_deadline() < drained_at);
    q.drain(1ms);
    REQUIRE_FALSE(q.empty());
    CHECK(q.next_deadline() == drained_at + 50ms);
    q.flush();
    CHECK(q.next_deadline() == dt::manual_clock::time_point::max());
}

TEST_CASE("queue: options are kept as given") {
    scripted_queue q{inline_mode({.unmap_chunk_bytes = 512 * 1024, .max_pending_bytes = 64 * mib, .max_delay = 20ms})};
    CHECK(q.options().unmap_chunk_bytes == 512 * 1024);
    CHECK(q.options().max_pending_bytes == 64 * mib);
    CHECK(q.options().max_delay == 20ms);
    CHECK_FALSE(q.options().close_on_worker);
}

TEST_CASE("queue: a push beyond max_pending_items reclaims the oldest until it fits") {
    dt::reset();
    scripted_queue q{inline_mode({.max_pending_items = 4})};
    std::vector<int> fds;
    for (int i = 0; i < 4; ++i) {
        auto pool = dt::make_region(64 * 1024);
        fds.push_back(pool.fd());
        q.push(std::move(pool));
    }
    CHECK(dt::script().calls().size() == 4);  // the four maps: nothing torn down yet
    q.push(dt::make_region(64 * 1024));  // a fifth: the oldest goes, mapping and descriptor, now
    CHECK(q.pending_items() == 4);
    CHECK_FALSE(dt::script().is_open(fds[0]));
    CHECK(dt::script().is_open(fds[1]));
    CHECK(q.stats().cap_steps == 2);
}

TEST_CASE("queue: over max_pending_items with close_on_worker, the pushing thread makes only munmaps") {
    dt::reset();
    du::basic_reclaim_queue<std::chrono::steady_clock, dt::scripted_os> q{{.max_pending_items = 8}};
    std::size_t most_mapped = 0;
    for (int i = 0; i < 1000; ++i) {  // a client churning small pools
        q.push(dt::make_region(4096));
        most_mapped = std::max(most_mapped, dt::script().mapped_bytes());
    }
    CHECK(most_mapped <= 8 * 4096);  // never more mappings than the cap
    REQUIRE(q.wait_for_worker(10s));
    const auto pusher = std::this_thread::get_id();
    std::size_t closes_here = 0;
    for (const auto& c : dt::script().calls()) closes_here += c.op == call_kind::close && c.thread == pusher ? 1 : 0;
    CHECK(closes_here == 0);
    CHECK(q.stats().cap_steps >= 992);
    q.flush();
    CHECK(dt::script().open_fds() == 0);
}

TEST_CASE("options: a zero, negative, NaN or infinite first_step_ns_per_byte is refused") {
    for (const double bad : {0.0, -0.01, std::nan(""), std::numeric_limits<double>::infinity()})
        CHECK(du::validate(du::reclaim_options{.first_step_ns_per_byte = bad}) == std::errc::invalid_argument);
    CHECK(!du::validate(du::reclaim_options{.first_step_ns_per_byte = 1e-6}));
}

TEST_CASE("options: max_pending_items of 0 is refused") {
    CHECK(du::validate(du::reclaim_options{.max_pending_items = 0}) == std::errc::invalid_argument);
    CHECK(!du::validate(du::reclaim_options{.max_pending_items = 1}));
}

TEST_CASE("options: a worker_pause outside 0..max_worker_pause is refused") {
    CHECK(!du::validate(du::reclaim_options{.worker_pause = 0ns}));
    CHECK(!du::validate(du::reclaim_options{.worker_pause = du::max_worker_pause}));
    for (const auto pause : {du::max_worker_pause + 1ns, std::chrono::nanoseconds{std::chrono::hours{1}},
                             std::chrono::nanoseconds::max(), -1ns}) {
        CAPTURE(pause.count());
        CHECK(du::validate(du::reclaim_options{.worker_pause = pause}) == std::errc::invalid_argument);
        CHECK_THROWS_AS(scripted_queue(du::reclaim_options{.unmap_on_worker = true, .worker_pause = pause}), std::system_error);
    }
}

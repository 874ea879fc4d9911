#include <doctest/doctest.h>

#include "test_support.hpp"

#include <new>
#include <stdexcept>

using namespace du_test;
using namespace std::chrono_literals;

namespace {

bool fail_array_new = false;

struct error_log {
    std::vector<du::reclaim_error> errors;
    du::reclaim_options options(du::reclaim_options base = {}) {
        base.on_error = [this](const du::reclaim_error& e) { errors.push_back(e); };
        return base;
    }
};

}  // namespace

// The queue's ring grows with new[](nothrow); this lets a test make that growth fail.
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
    if (fail_array_new) return nullptr;
    try {
        return ::operator new[](size);
    } catch (...) {
        return nullptr;
    }
}

TEST_CASE("queue: a chunk that fails with ENOMEM falls back to unmapping the whole rest") {
    auto& os = dt::reset();
    os.fail = [](const dt::os_call& c) { return c.op == call_kind::unmap && c.length == 2 * mib ? ENOMEM : 0; };
    error_log log;
    scripted_queue q{log.options(two_mib_steps())};
    auto region = dt::make_region(7 * mib);
    auto* base = static_cast<std::byte*>(region.data());
    q.push(std::move(region));
    const auto report = q.drain(1ms);
    CHECK(report.errors == 1);
    CHECK(report.bytes_unmapped == 7 * mib);
    REQUIRE(log.errors.size() == 1);
    CHECK(log.errors[0].op == du::reclaim_error::operation::unmap);
    CHECK(log.errors[0].error == ENOMEM);
    CHECK(log.errors[0].addr == base);
    CHECK(log.errors[0].recovered);
    q.flush();
    const auto s = q.stats();
    CHECK(s.unmap_errors == 1);
    CHECK(s.fallback_unmaps == 1);
    CHECK(s.bytes_leaked == 0);
    CHECK(s.items_reclaimed == 1);
    CHECK(os.mapped_bytes() == 0);
    CHECK(os.open_fds() == 0);
}

TEST_CASE("queue: when even the fallback fails the bytes are reported leaked and the fd still closes") {
    auto& os = dt::reset();
    os.fail = [](const dt::os_call& c) { return c.op == call_kind::unmap ? EINVAL : 0; };
    error_log log;
    scripted_queue q{log.options()};
    q.push(dt::make_region(5 * mib));
    q.flush();
    const auto s = q.stats();
    CHECK(s.unmap_errors == 2);
    CHECK(s.bytes_leaked == 5 * mib);
    CHECK(s.items_reclaimed == 1);
    CHECK(log.errors.size() == 2);
    CHECK_FALSE(log.errors[1].recovered);
    CHECK(os.open_fds() == 0);
    CHECK(q.empty());
    CHECK(os.misuse() == 0);
}

TEST_CASE("queue: a close that reports EIO or EINTR is counted once and never retried") {
    for (const int error : {EIO, EINTR}) {
        auto& os = dt::reset();
        os.fail = [error](const dt::os_call& c) { return c.op == call_kind::close ? error : 0; };
        error_log log;
        scripted_queue q{log.options()};
        q.push(dt::make_region(mib));
        q.flush();
        CHECK(os.count(call_kind::close) == 1);
        CHECK(q.stats().close_errors == 1);
        REQUIRE(log.errors.size() == 1);
        CHECK(log.errors[0].error == error);
        CHECK(log.errors[0].fd >= 0);
        CHECK(q.empty());
    }
}

TEST_CASE("queue: an error callback that throws cannot escape a drain") {
    auto& os = dt::reset();
    os.fail = [](const dt::os_call& c) { return c.op == call_kind::close ? EIO : 0; };
    scripted_queue q{inline_mode({.on_error = [](const du::reclaim_error&) { throw std::runtime_error("host bug"); }})};
    q.push(dt::make_region(mib));
    q.push(dt::make_region(mib));
    CHECK_NOTHROW(q.drain(1s));
    CHECK(q.empty());
    CHECK(q.stats().close_errors == 2);
}

TEST_CASE("queue: the queue stays usable after errors") {
    auto& os = dt::reset();
    int failures = 3;
    os.fail = [&failures](const dt::os_call& c) { return c.op != call_kind::map && failures-- > 0 ? EIO : 0; };
    scripted_queue q{inline_mode()};
    for (int i = 0; i < 4; ++i) q.push(dt::make_region(3 * mib));
    while (!q.empty()) q.drain(200us);
    CHECK(q.stats().items_reclaimed == 4);
    CHECK(os.open_fds() == 0);
    CHECK(os.misuse() == 0);
}

TEST_CASE("queue: a push the queue cannot make room for goes after everything older, mapping before descriptor") {
    dt::reset();
    scripted_queue q{inline_mode({.initial_capacity = 16})};
    // The wlroots pattern: the mapping and the descriptor of each pool are pushed separately.
    std::vector<int> fds;
    for (int i = 0; i < 8; ++i) {
        auto [fd, map] = dt::make_region(mib).release();
        fds.push_back(fd.get());
        q.push(std::move(map));
        q.push(std::move(fd), mib);
    }
    dt::scripted_fd last{dt::script().open_fd(mib)};
    const int last_fd = last.get();
    {
        const dt::allocation_failure no_heap;
        q.push(std::move(last), mib);  // the ring holds 16: no room for a 17th
    }
    CHECK(q.empty());
    const auto s = q.stats();
    CHECK(s.synchronous_pushes == 1);
    CHECK(s.items_pushed == 17);
    CHECK(s.items_reclaimed == 17);
    const auto calls = dt::script().calls();
    std::vector<int> closes;
    std::size_t unmaps_seen = 0;
    for (const auto& c : calls) {
        if (c.op == call_kind::unmap) ++unmaps_seen;
        if (c.op != call_kind::close) continue;
        closes.push_back(c.fd);
        CHECK(unmaps_seen >= std::min<std::size_t>(closes.size(), 8));  // pool i's descriptor after its mapping
    }
    fds.push_back(last_fd);
    CHECK(closes == fds);  // oldest first, the new one last
    CHECK(dt::script().open_fds() == 0);
    CHECK(dt::script().mapped_bytes() == 0);
    CHECK(dt::script().misuse() == 0);
}

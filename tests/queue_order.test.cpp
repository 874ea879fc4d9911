#include <doctest/doctest.h>

#include "test_support.hpp"

#include <map>

using namespace du_test;
using namespace std::chrono_literals;

namespace {

struct pool_id {
    const void* addr;
    std::size_t bytes;
    int fd;
};

pool_id push_pool(scripted_queue& q, std::size_t bytes) {
    auto region = dt::make_region(bytes);
    const pool_id id{region.data(), region.size(), region.fd()};
    q.push(std::move(region));
    return id;
}

// For every pool: all its unmaps come before its one close, and its bytes were unmapped exactly once.
void check_unmap_before_close(const std::vector<pool_id>& pools) {
    const auto calls = dt::script().calls();
    for (const auto& pool : pools) {
        std::ptrdiff_t last_unmap = -1;
        std::ptrdiff_t close_at = -1;
        for (std::size_t i = 0; i < calls.size(); ++i) {
            const auto& c = calls[i];
            const auto* lo = static_cast<const std::byte*>(pool.addr);
            const auto* at = static_cast<const std::byte*>(c.addr);
            if (c.op == call_kind::unmap && at >= lo && at < lo + pool.bytes) last_unmap = static_cast<std::ptrdiff_t>(i);
            if (c.op == call_kind::close && c.fd == pool.fd && close_at == -1) close_at = static_cast<std::ptrdiff_t>(i);
        }
        CHECK(last_unmap >= 0);
        CHECK(close_at > last_unmap);
    }
    CHECK(dt::script().misuse() == 0);
    CHECK(dt::script().open_fds() == 0);
    CHECK(dt::script().mapped_bytes() == 0);
}

}  // namespace

TEST_CASE("queue: push and drain unmap each pool before closing it") {
    dt::reset().unmap_ns_per_byte = 0.05;
    scripted_queue q{inline_mode()};
    std::vector<pool_id> pools;
    for (int i = 0; i < 5; ++i) pools.push_back(push_pool(q, 7 * mib));
    while (!q.empty()) q.drain(300us);
    check_unmap_before_close(pools);
}

TEST_CASE("queue: flush unmaps each pool before closing it") {
    dt::reset();
    scripted_queue q{inline_mode()};
    std::vector<pool_id> pools;
    for (int i = 0; i < 5; ++i) pools.push_back(push_pool(q, 3 * mib));
    q.drain(1ns);  // leave the oldest half done
    q.flush();
    CHECK(q.empty());
    CHECK(q.pending_bytes() == 0);
    check_unmap_before_close(pools);
}

TEST_CASE("queue: the destructor unmaps each pool before closing it") {
    dt::reset();
    std::vector<pool_id> pools;
    {
        scripted_queue q{inline_mode()};
        for (int i = 0; i < 5; ++i) pools.push_back(push_pool(q, 3 * mib));
    }
    check_unmap_before_close(pools);
}

TEST_CASE("queue: pools are reclaimed oldest first") {
    dt::reset();
    scripted_queue q{inline_mode({.unmap_chunk_bytes = 64 * mib})};
    std::vector<pool_id> pools;
    for (int i = 0; i < 6; ++i) pools.push_back(push_pool(q, mib));
    q.flush();
    std::vector<int> closes;
    std::vector<const void*> unmaps;
    for (const auto& c : dt::script().calls()) {
        if (c.op == call_kind::close) closes.push_back(c.fd);
        if (c.op == call_kind::unmap) unmaps.push_back(c.addr);
    }
    REQUIRE(closes.size() == pools.size());
    REQUIRE(unmaps.size() == pools.size());
    for (std::size_t i = 0; i < pools.size(); ++i) {
        CHECK(closes[i] == pools[i].fd);
        CHECK(unmaps[i] == pools[i].addr);
    }
}

TEST_CASE("queue: bare mappings and bare descriptors are reclaimed too") {
    dt::reset();
    scripted_queue q{inline_mode()};
    auto region = dt::make_region(3 * mib);
    auto [fd, map] = region.release();
    q.push(std::move(map));
    q.push(std::move(fd), 3 * mib);
    CHECK(q.pending_items() == 2);
    CHECK(q.pending_bytes() == 3 * mib);
    q.flush();
    CHECK(dt::script().open_fds() == 0);
    CHECK(dt::script().mapped_bytes() == 0);
    CHECK(q.stats().items_reclaimed == 2);
}

TEST_CASE("queue: pushing empty handles is a no-op") {
    dt::reset();
    scripted_queue q{inline_mode()};
    q.push(dt::scripted_region{});
    q.push(dt::scripted_mapping{});
    q.push(dt::scripted_fd{});
    CHECK(q.empty());
    CHECK(q.stats().items_pushed == 0);
}

TEST_CASE("queue: a reused descriptor number is never closed twice") {
    dt::reset();
    scripted_queue q{inline_mode()};
    auto first = dt::make_region(mib);
    const int number = first.fd();
    q.push(std::move(first));
    q.flush();
    CHECK_FALSE(dt::script().is_open(number));
    const int reused = dt::script().open_fd();
    REQUIRE(reused == number);  // the lowest free number comes back, as on a real kernel
    q.push(dt::make_region(mib));
    q.flush();
    CHECK(dt::script().is_open(reused));
    CHECK(dt::script().misuse() == 0);
}

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <fcntl.h>

#include <random>

using namespace du_test;
using namespace std::chrono_literals;

namespace {

void push_real_pools(du::reclaim_queue& q, int count) {
    std::mt19937 rng{42};
    std::uniform_int_distribution<std::size_t> pages{1, 1024};
    for (int i = 0; i < count; ++i) q.push(real_pool(pages(rng) * 4096));
}

// glibc keeps an exited thread's stack and malloc arena for the next thread. Starting one worker
// before the snapshot lets those settle, so what the comparison sees is the queue's own doing.
void warm_up_worker_thread() {
    du::reclaim_queue warm{{.close_on_worker = true}};
    warm.push(real_pool(4096));
    warm.flush();
}

}  // namespace

TEST_CASE("real memfds: 200 pools pushed and drained leave /proc/self/fd and /proc/self/maps as they were") {
    for (const bool on_worker : {false, true}) {
        CAPTURE(on_worker);
        warm_up_worker_thread();
        const auto fds = open_fds();
        const auto before = maps();
        {
            du::reclaim_queue q{{.close_on_worker = on_worker}};
            push_real_pools(q, 200);
            CHECK(q.pending_items() == 200);
            while (q.pending_bytes() > 0) q.drain(1ms);
            q.flush();
            const auto s = q.stats();
            CHECK(s.items_reclaimed == 200);
            CHECK(s.fds_closed == 200);
            CHECK(s.unmap_errors + s.close_errors == 0);
            CHECK(s.bytes_unmapped == s.bytes_pushed);
        }
        CHECK(open_fds() == fds);
        CHECK(maps() == before);
    }
}

TEST_CASE("real memfds: the queue's destructor gives everything back") {
    warm_up_worker_thread();
    const auto fds = open_fds();
    const auto before = maps();
    {
        du::reclaim_queue q{{.unmap_on_worker = true}};
        push_real_pools(q, 50);
        q.drain(1ms);
    }
    CHECK(open_fds() == fds);
    CHECK(maps() == before);
}

TEST_CASE("real memfds: a closed descriptor number reused by a new fd is never closed by the queue") {
    du::reclaim_queue q{inline_mode()};
    auto pool = real_pool(1 << 20);
    const int number = pool.fd();
    q.push(std::move(pool));
    q.flush();
    du::unique_fd reused{::memfd_create("du-reuse", MFD_CLOEXEC)};
    REQUIRE(reused.get() == number);  // the kernel hands out the lowest free number
    q.push(real_pool(1 << 20));
    q.flush();
    CHECK(::fcntl(reused.get(), F_GETFD) != -1);
    CHECK(q.stats().close_errors == 0);
}

TEST_CASE("real memfds: the mapping is gone before the descriptor is closed") {
    // Between the last munmap and the close, the pool is still open but no longer mapped.
    du::reclaim_queue q{inline_mode({.unmap_chunk_bytes = 1 << 20})};
    auto pool = real_pool(4 << 20);
    const int fd = pool.fd();
    const auto name = "/memfd:du-test";
    q.push(std::move(pool));
    while (q.pending_bytes() > 0) q.drain(1ns);
    CHECK(maps().find(name) == std::string::npos);
    CHECK(::fcntl(fd, F_GETFD) != -1);
    q.drain(1ns);
    CHECK(::fcntl(fd, F_GETFD) == -1);
}

// A descriptor pushed on its own, after its mapping, with no size (the order reclaim_queue.hpp
// documents for a pool whose mapping and descriptor part ways): its close may free everything the
// client wrote. Inline, a drain must not take it for a free call.
#include <doctest/doctest.h>

#include "test_support.hpp"

using namespace du_test;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t written = 256 * mib;

// scripted_os without allocated_bytes(): an Os that cannot say what a close frees.
struct blind_os {
    static void* map(void* hint, std::size_t length, int prot, int flags, int fd, off_t offset, int& error) noexcept {
        return dt::scripted_os::map(hint, length, prot, flags, fd, offset, error);
    }
    static int unmap(void* addr, std::size_t length) noexcept { return dt::scripted_os::unmap(addr, length); }
    static int close(int fd) noexcept { return dt::scripted_os::close(fd); }
    static std::chrono::nanoseconds thread_cpu_time() noexcept { return dt::scripted_os::thread_cpu_time(); }
};
static_assert(!du::has_allocated_bytes<blind_os>);

// Closes cost `close_rate` ns a byte the descriptor holds: at the prior's 0.15, ~40 ms for 256 MiB.
// The mapping is gone when this returns.
template <class Os>
int pushed_unsized(du::basic_reclaim_queue<dt::manual_clock, Os>& q, double close_rate = 0.15) {
    auto& os = dt::reset();
    os.call_overhead = 1us;
    os.close_ns_per_byte = close_rate;
    const int fd = os.open_fd(written);
    std::error_code ec;
    auto map = du::basic_mapping<Os>::map(fd, written, PROT_READ, MAP_SHARED, 0, ec);
    REQUIRE(!ec);
    q.push(std::move(map));
    q.push(du::basic_unique_fd<Os>{fd});  // bytes_hint left at 0: unknown
    while (q.pending_bytes() > 0) q.drain(1ms);
    return fd;
}

}  // namespace

TEST_CASE("inline: drain_until does not start the close of a descriptor pushed with no size that frees 256 MiB") {
    scripted_queue q{inline_mode()};
    const int fd = pushed_unsized(q);
    const auto report = q.drain_until(dt::manual_clock::now() + 1ms);
    CHECK(report.steps == 0);
    CHECK(report.elapsed <= 1ms);
    CHECK(dt::script().is_open(fd));
    // drain()'s first step runs whatever its prediction: the idle timer's drain makes it.
    CHECK(q.drain(4ms).fds_closed == 1);
    CHECK(!dt::script().is_open(fd));
}

TEST_CASE("inline: the close of a descriptor pushed with no size teaches the model its real cost") {
    scripted_queue q{inline_mode()};
    pushed_unsized(q, 0.3);  // twice the prior's rate
    q.drain(4ms);
    // Learned as 256 MiB: a quarter of the way from 0.15 to 0.3. A close taken for 0 bytes teaches nothing.
    CHECK(q.model().close_ns_per_byte == doctest::Approx(0.1875).epsilon(0.01));
    CHECK(q.stats().close_errors == 0);
}

TEST_CASE("inline: where the Os cannot size a descriptor pushed with no size, no deadline fits its close") {
    du::basic_reclaim_queue<dt::manual_clock, blind_os> q{inline_mode()};
    const int fd = pushed_unsized(q);
    CHECK(q.drain_until(dt::manual_clock::now() + 1s).steps == 0);
    CHECK(dt::script().is_open(fd));
    CHECK(q.drain(1ms).fds_closed == 1);  // the first step of drain() still runs
}

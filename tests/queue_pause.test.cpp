// drain_pause: what a host sees of the sleep a drain takes between two munmap steps.
#include <doctest/doctest.h>

#include "test_support.hpp"

#include <thread>
#include <vector>

using namespace du_test;
using namespace std::chrono_literals;

namespace {

// Scripted costs: 1 us per call, 50 us per MiB unmapped, 1 us per MiB closed. With max_step 200 us a
// munmap step covers ~4 MiB, so an 8 MiB pool takes two or three of them.
constexpr double unmap_rate = 50'000.0 / static_cast<double>(mib);
constexpr double close_rate = 1'000.0 / static_cast<double>(mib);

du::cost_model exact_model() {
    du::cost_model m;
    m.unmap_ns_per_byte = unmap_rate;
    m.close_ns_per_byte = close_rate;
    m.call_overhead = 1us;
    return m;
}

void scripted_costs() {
    auto& os = dt::reset();
    os.call_overhead = 1us;
    os.unmap_ns_per_byte = unmap_rate;
    os.close_ns_per_byte = close_rate;
}

du::reclaim_options paced(std::chrono::nanoseconds pause) {
    return inline_mode({.max_step = 200us, .drain_pause = pause, .prior = exact_model()});
}

std::vector<dt::os_call> calls_since(std::size_t seen) {
    auto calls = dt::script().calls();
    calls.erase(calls.begin(), calls.begin() + static_cast<std::ptrdiff_t>(seen));
    return calls;
}

// What the script charged for `c`: its scripted cost, or the sleep it asked for.
std::chrono::nanoseconds cost_of(const dt::os_call& c) {
    if (c.op == call_kind::pause) return c.slept;
    const double rate = c.op == call_kind::unmap ? unmap_rate : close_rate;
    return 1us + std::chrono::nanoseconds{static_cast<std::int64_t>(rate * static_cast<double>(c.length))};
}

std::size_t count(const std::vector<dt::os_call>& calls, call_kind op) {
    return static_cast<std::size_t>(std::count_if(calls.begin(), calls.end(), [op](const dt::os_call& c) { return c.op == op; }));
}

// Two munmap calls in a row with no pause between them, in `calls`.
std::size_t unpaused_unmap_pairs(const std::vector<dt::os_call>& calls) {
    std::size_t pairs = 0;
    for (std::size_t i = 1; i < calls.size(); ++i)
        pairs += calls[i - 1].op == call_kind::unmap && calls[i].op == call_kind::unmap ? 1 : 0;
    return pairs;
}

}  // namespace

TEST_CASE("drain_pause: a drain sleeps between two munmap steps, and only there") {
    scripted_costs();
    scripted_queue q{paced(30us)};
    for (int i = 0; i < 3; ++i) q.push(dt::make_region(8 * mib));
    const std::size_t seen = dt::script().calls().size();
    const auto report = q.drain(2ms);
    const auto calls = calls_since(seen);
    REQUIRE(calls.size() >= 3);
    CHECK(count(calls, call_kind::pause) >= 2);
    CHECK(calls.front().op == call_kind::unmap);
    CHECK(calls.back().op != call_kind::pause);
    CHECK(unpaused_unmap_pairs(calls) == 0);
    for (std::size_t i = 0; i < calls.size(); ++i) {
        if (calls[i].op != call_kind::pause) continue;
        CHECK(calls[i].slept == 30us);
        CHECK(calls[i - 1].op == call_kind::unmap);  // never after a close: a close takes no mmap_lock
        CHECK(calls[i + 1].op == call_kind::unmap);
    }
    CHECK(report.steps == calls.size() - count(calls, call_kind::pause));
}

TEST_CASE("drain_pause: the sleep is spent from the budget, which still holds") {
    scripted_costs();
    scripted_queue q{paced(100us)};
    for (int i = 0; i < 4; ++i) q.push(dt::make_region(8 * mib));
    for (const std::chrono::nanoseconds budget : {std::chrono::nanoseconds{1ms}, std::chrono::nanoseconds{700us}, std::chrono::nanoseconds{2500us}}) {
        const std::size_t seen = dt::script().calls().size();
        const auto report = q.drain(budget);
        const auto calls = calls_since(seen);
        std::chrono::nanoseconds spent{0};
        for (const auto& c : calls) spent += cost_of(c);
        CHECK(count(calls, call_kind::pause) >= 1);
        CHECK(report.elapsed == spent);
        CHECK(report.elapsed <= budget);
    }
}

TEST_CASE("drain_pause: a drain whose pause leaves no room for the next step stops instead") {
    for (const std::chrono::nanoseconds pause : {std::chrono::nanoseconds{900us}, std::chrono::nanoseconds::max()}) {
        scripted_costs();
        scripted_queue q{paced(pause)};
        q.push(dt::make_region(8 * mib));
        const auto report = q.drain(1ms);
        CHECK(report.steps == 1);
        CHECK(dt::script().count(call_kind::pause) == 0);
        CHECK(report.elapsed < 250us);
    }
}

TEST_CASE("drain_pause: drain_until sleeps too, and never ends after its deadline") {
    scripted_costs();
    scripted_queue q{paced(30us)};
    for (int i = 0; i < 3; ++i) q.push(dt::make_region(8 * mib));
    const std::size_t seen = dt::script().calls().size();
    const auto deadline = dt::manual_clock::now() + 1500us;
    q.drain_until(deadline);
    CHECK(dt::manual_clock::now() <= deadline);
    const auto calls = calls_since(seen);
    CHECK(count(calls, call_kind::pause) >= 2);
    CHECK(unpaused_unmap_pairs(calls) == 0);
}

TEST_CASE("drain_pause: flush and a push over the cap run their steps back to back") {
    scripted_costs();
    {
        scripted_queue q{paced(30us)};
        for (int i = 0; i < 3; ++i) q.push(dt::make_region(8 * mib));
        q.flush();
        CHECK(q.empty());
    }
    {
        auto options = paced(30us);
        options.max_pending_bytes = 12 * mib;
        scripted_queue q{std::move(options)};
        q.push(dt::make_region(8 * mib));
        q.push(dt::make_region(8 * mib));  // over the cap: the first goes on this thread
        CHECK(q.pending_bytes() <= 12 * mib);
    }
    const auto calls = calls_since(0);
    CHECK(count(calls, call_kind::unmap) >= 6);
    CHECK(count(calls, call_kind::pause) == 0);
}

TEST_CASE("drain_pause: with closes on the worker, the pause still falls between two pools' munmaps") {
    scripted_costs();
    scripted_queue q{{.max_step = 200us, .drain_pause = 30us, .prior = exact_model()}};
    for (int i = 0; i < 3; ++i) q.push(dt::make_region(3 * mib));  // one munmap step each
    q.drain(10ms);
    REQUIRE(q.wait_for_worker(10s));
    std::vector<dt::os_call> mine;
    for (const auto& c : calls_since(0))
        if (c.thread == std::this_thread::get_id()) mine.push_back(c);
    CHECK(count(mine, call_kind::unmap) == 3);
    CHECK(count(mine, call_kind::close) == 0);
    CHECK(count(mine, call_kind::pause) == 2);
    CHECK(unpaused_unmap_pairs(mine) == 0);
}

namespace {

// scripted_os without pause(): an Os that cannot sleep.
struct sleepless_os {
    static void* map(void* hint, std::size_t length, int prot, int flags, int fd, off_t offset, int& error) noexcept {
        return dt::scripted_os::map(hint, length, prot, flags, fd, offset, error);
    }
    static int unmap(void* addr, std::size_t length) noexcept { return dt::scripted_os::unmap(addr, length); }
    static int close(int fd) noexcept { return dt::scripted_os::close(fd); }
    static std::chrono::nanoseconds thread_cpu_time() noexcept { return dt::scripted_os::thread_cpu_time(); }
};
static_assert(!du::has_pause<sleepless_os>);

du::basic_shm_region<sleepless_os> sleepless_region(std::size_t bytes) {
    const int fd = dt::script().open_fd(bytes);
    std::error_code ec;
    auto map = du::basic_mapping<sleepless_os>::map(fd, bytes, PROT_READ, MAP_SHARED, 0, ec);
    return {du::basic_unique_fd<sleepless_os>{fd}, std::move(map)};
}

}  // namespace

TEST_CASE("drain_pause: an Os that cannot sleep runs steps back to back and spends no budget on a pause") {
    std::size_t steps[2] = {};
    for (const std::chrono::nanoseconds pause : {std::chrono::nanoseconds{0}, std::chrono::nanoseconds{100us}}) {
        scripted_costs();
        du::basic_reclaim_queue<dt::manual_clock, sleepless_os> q{paced(pause)};
        for (int i = 0; i < 3; ++i) q.push(sleepless_region(8 * mib));
        steps[pause == 0ns ? 0 : 1] = q.drain(1ms).steps;
        CHECK(dt::script().count(call_kind::pause) == 0);
    }
    CHECK(steps[0] == steps[1]);
}

TEST_CASE("options: a negative drain_pause is refused") {
    CHECK(!du::validate(du::reclaim_options{.drain_pause = 0ns}));
    CHECK(du::validate(du::reclaim_options{.drain_pause = -1ns}) == std::errc::invalid_argument);
}

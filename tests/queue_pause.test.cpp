// drain_pause: what a host sees of the sleep a drain takes between two munmap steps.
#include <doctest/doctest.h>

#include "test_support.hpp"

#include <thread>
#include <vector>

using namespace du_test;
using namespace std::chrono_literals;

namespace {

// Scripted costs: 1 us per call, 50 us per MiB unmapped, 1 us per MiB closed. With max_step 200 us a
// munmap step covers at most ~4 MiB, so an 8 MiB pool goes in three even steps of ~134 us.
constexpr double unmap_rate = 50'000.0 / static_cast<double>(mib);
constexpr double close_rate = 1'000.0 / static_cast<double>(mib);

du::cost_model exact_model() { return linear_model(unmap_rate, close_rate, 1us); }

// `pause_overshoot`: what each sleep takes on top of what it asked.
void scripted_costs(std::chrono::nanoseconds pause_overshoot = {}) {
    auto& os = dt::reset();
    os.call_overhead = 1us;
    os.unmap_ns_per_byte = unmap_rate;
    os.close_ns_per_byte = close_rate;
    os.pause_overshoot = pause_overshoot;
}

du::reclaim_options paced(std::chrono::nanoseconds pause) {
    return inline_mode({.max_step = 200us, .first_step_ns_per_byte = unmap_rate, .prior = exact_model(), .drain_pause = pause});
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
        REQUIRE(i + 1 < calls.size());
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
        CHECK(report.elapsed < 150us);  // one ~134 us step, no sleep
    }
}

TEST_CASE("drain_pause: drain_until sleeps too, and never sleeps into a deadline the next step would miss") {
    scripted_costs();
    scripted_queue q{paced(30us)};
    for (int i = 0; i < 3; ++i) q.push(dt::make_region(8 * mib));
    std::size_t seen = dt::script().calls().size();
    auto deadline = dt::manual_clock::now() + 1500us;
    q.drain_until(deadline);
    CHECK(dt::manual_clock::now() <= deadline);
    auto calls = calls_since(seen);
    CHECK(count(calls, call_kind::pause) >= 2);
    CHECK(unpaused_unmap_pairs(calls) == 0);
    // Room for two ~134 us steps back to back, not with 30 us between them: one step, no sleep.
    q.push(dt::make_region(8 * mib));
    q.flush();
    q.push(dt::make_region(8 * mib));
    seen = dt::script().calls().size();
    deadline = dt::manual_clock::now() + 285us;
    q.drain_until(deadline);
    calls = calls_since(seen);
    CHECK(count(calls, call_kind::unmap) == 1);
    CHECK(count(calls, call_kind::pause) == 0);
}

TEST_CASE("drain_pause: a sleep that runs long ends the drain instead of a step past the deadline") {
    scripted_costs(750us);  // a 50 us sleep takes 800 us
    scripted_queue q{paced(50us)};
    q.push(dt::make_region(8 * mib));
    const std::size_t seen = dt::script().calls().size();
    const auto report = q.drain(1ms);
    const auto calls = calls_since(seen);
    CHECK(report.steps == 1);  // ~134 us, then the sleep to ~934 us: a second step would end past 1 ms
    REQUIRE(calls.size() == 2);
    CHECK(calls.back().op == call_kind::pause);
    CHECK(report.elapsed <= 1ms);
}

namespace {

// Whole pages of a munmap step the exact model predicts fits max_step 200 us.
std::size_t exact_step() { return du::detail::step_bytes(1us, unmap_rate, 200us, du::detail::page_size()); }

}  // namespace

TEST_CASE("drain_pause: how long the sleeps really take is learned, so a drain stops sleeping where the rest no longer fits") {
    scripted_costs(100us);  // each 50 us sleep takes 150 us
    scripted_queue q{paced(50us)};
    q.push(dt::make_region(100 * exact_step()));
    // A 1.2 ms drain: steps end at ~200, 550 and 900 us. With 300 us left, a sleep budgeted at the
    // 50 us asked would fit before a step, but takes 150 us, after which the step does not: once the
    // queue has learned that, every drain ends on a step, within its budget.
    std::size_t ending_on_a_pause = 0;
    for (int i = 0; i < 20; ++i) {
        const std::size_t seen = dt::script().calls().size();
        const auto report = q.drain(1200us);
        const auto calls = calls_since(seen);
        REQUIRE(!calls.empty());
        CHECK(report.elapsed <= 1200us);
        if (i >= 10) CHECK(calls.back().op == call_kind::unmap);
        ending_on_a_pause += calls.back().op == call_kind::pause ? 1 : 0;
    }
    CHECK(ending_on_a_pause >= 1);  // before it learned: the sleep the test is about
}

TEST_CASE("drain_pause: after a spell of late wake-ups, drains go back to pausing between steps") {
    scripted_costs();
    scripted_queue q{paced(50us)};
    q.push(dt::make_region(1000 * exact_step()));
    const auto drain_steps = [&q] { return q.drain(1ms).steps; };
    const std::size_t calm = drain_steps();  // ~200 us steps with 50 us sleeps between them
    REQUIRE(calm >= 3);
    dt::script().pause_overshoot = 3ms;  // every sleep now wakes 3 ms late
    for (int i = 0; i < 12; ++i) drain_steps();
    CHECK(drain_steps() == 1);  // the sleeps it expects no longer fit: one step a drain
    dt::script().pause_overshoot = 0ns;
    std::size_t drains = 0;
    while (drains < 50 && drain_steps() < calm) ++drains;
    CHECK(drains < 50);
}

TEST_CASE("drain_pause: sleeps cut short never make the queue budget less than the pause it asks for") {
    scripted_costs(-40us);  // every 50 us sleep ends after 10 us, as if a signal cut it short
    scripted_queue q{paced(50us)};
    q.push(dt::make_region(1000 * exact_step()));
    // 850 us: steps end at ~200, ~410 and ~620 us. A fourth would fit after a 10 us sleep, not after
    // the 50 us the queue must keep budgeting.
    for (int i = 0; i < 15; ++i) {
        const std::size_t seen = dt::script().calls().size();
        const auto report = q.drain(850us);
        CHECK(report.steps == 3);
        CHECK(count(calls_since(seen), call_kind::pause) == 2);
    }
}

namespace {

// scripted_os without thread_cpu_time(): the queue learns from wall time, which a pause must not enter.
struct wall_clock_os : scripted_calls {
    static void pause(std::chrono::nanoseconds d) noexcept { dt::scripted_os::pause(d); }
};
static_assert(du::has_pause<wall_clock_os> && !du::has_thread_cpu_time<wall_clock_os>);

}  // namespace

TEST_CASE("drain_pause: the sleep is not booked as part of a step, nor learned as one") {
    // 3/64 ns per byte is exact in binary: a step costing what the model predicts leaves it unchanged.
    constexpr double rate = 3.0 / 64.0;
    const du::cost_model model = linear_model(rate, 0.0, 1us);
    const auto costs = [] {
        auto& os = dt::reset();
        os.call_overhead = 1us;
        os.unmap_ns_per_byte = rate;
    };
    const auto options = inline_mode({.max_step = 200us, .first_step_ns_per_byte = model.unmap_ns_per_byte, .prior = model, .drain_pause = 150us});
    {
        costs();
        scripted_queue q{options};
        q.push(dt::make_region(16 * mib));
        q.drain(2ms);
        REQUIRE(dt::script().count(call_kind::pause) >= 2);
        CHECK(q.stats().step_durations.max() <= 200us);
    }
    costs();
    du::basic_reclaim_queue<dt::manual_clock, wall_clock_os> q{options};
    q.push(make_region_for<wall_clock_os>(16 * mib));
    q.drain(2ms);
    REQUIRE(dt::script().count(call_kind::pause) >= 2);
    CHECK(q.stats().step_durations.max() <= 200us);
    CHECK(q.model().unmap_ns_per_byte == rate);
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
    scripted_queue q{{.max_step = 200us, .first_step_ns_per_byte = unmap_rate, .prior = exact_model(), .drain_pause = 30us}};
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
struct sleepless_os : scripted_calls {
    static std::chrono::nanoseconds thread_cpu_time() noexcept { return dt::scripted_os::thread_cpu_time(); }
};
static_assert(!du::has_pause<sleepless_os>);

}  // namespace

TEST_CASE("drain_pause: an Os that cannot sleep runs steps back to back and spends no budget on a pause") {
    std::size_t steps[2] = {};
    for (const std::chrono::nanoseconds pause : {std::chrono::nanoseconds{0}, std::chrono::nanoseconds{100us}}) {
        scripted_costs();
        du::basic_reclaim_queue<dt::manual_clock, sleepless_os> q{paced(pause)};
        for (int i = 0; i < 3; ++i) q.push(make_region_for<sleepless_os>(8 * mib));
        // 450 us: room for the first pool's three ~134 us munmaps and its 9 us close back to back,
        // for two munmaps if 100 us were kept for each pause.
        steps[pause == 0ns ? 0 : 1] = q.drain(450us).steps;
        CHECK(dt::script().count(call_kind::pause) == 0);
    }
    CHECK(steps[0] == 4);
    CHECK(steps[1] == steps[0]);
}

TEST_CASE("options: a negative drain_pause is refused") {
    CHECK(!du::validate(du::reclaim_options{.drain_pause = 0ns}));
    CHECK(du::validate(du::reclaim_options{.drain_pause = -1ns}) == std::errc::invalid_argument);
}

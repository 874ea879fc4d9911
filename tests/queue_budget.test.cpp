#include <doctest/doctest.h>

#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>
#include <vector>

using namespace du_test;
using namespace std::chrono_literals;

namespace {

// Scripted costs: 1 us per call, 50 us per MiB unmapped, 150 us per MiB closed.
constexpr double unmap_rate = 50'000.0 / static_cast<double>(mib);
constexpr double close_rate = 150'000.0 / static_cast<double>(mib);

du::cost_model exact_model() { return linear_model(unmap_rate, close_rate, 1us); }

dt::os_script& scripted_costs() {
    auto& os = dt::reset();
    os.call_overhead = 1us;
    os.unmap_ns_per_byte = unmap_rate;
    os.close_ns_per_byte = close_rate;
    return os;
}

// What the script charged for `c`, closes at `close_rate_used` (the script's rate unless a test changed it).
std::chrono::nanoseconds cost_of(const dt::os_call& c, double close_rate_used = close_rate) {
    const double rate = c.op == call_kind::unmap ? unmap_rate : close_rate_used;
    return 1us + std::chrono::nanoseconds{static_cast<std::int64_t>(rate * static_cast<double>(c.length))};
}

}  // namespace

TEST_CASE("queue: drain(0) does nothing") {
    scripted_costs();
    scripted_queue q{inline_mode()};
    q.push(dt::make_region(8 * mib));
    const auto report = q.drain(0ns);
    CHECK(report.steps == 0);
    CHECK(report.elapsed == 0ns);
    CHECK(report.pending_items == 1);
    CHECK(dt::script().count(call_kind::unmap) == 0);
    CHECK(q.drain(-5ms).steps == 0);
}

namespace {

// Runs drain(budget) on `q` for each budget and checks that every step after the first ended inside
// it (predictions are exact here). Returns, per drain, the budget it left and the step drain(1ns) ran next.
std::vector<std::pair<std::chrono::nanoseconds, dt::os_call>> drains_inside(scripted_queue& q, double close_rate_used) {
    std::vector<std::pair<std::chrono::nanoseconds, dt::os_call>> out;
    for (const auto budget : {1000us, 300us, 777us, 2500us}) {
        const std::size_t seen = dt::script().calls().size();
        const auto report = q.drain(budget);
        const auto calls = dt::script().calls();
        REQUIRE(report.steps == calls.size() - seen);
        std::chrono::nanoseconds spent{0};
        for (std::size_t i = seen; i < calls.size(); ++i) {
            spent += cost_of(calls[i], close_rate_used);
            if (i > seen) CHECK(spent <= budget);
        }
        CHECK(report.elapsed == spent);
        REQUIRE(q.drain(1ns).steps == 1);
        out.emplace_back(budget - spent, dt::script().calls().back());
    }
    return out;
}

}  // namespace

TEST_CASE("queue: drain never starts a step predicted not to fit") {
    SUBCASE("the munmap that stops a drain would have ended past its budget") {
        scripted_costs().close_ns_per_byte = 0.0;  // closes always fit: no close is ever set aside
        scripted_queue q{inline_mode({.first_step_ns_per_byte = unmap_rate, .prior = linear_model(unmap_rate, 0.0, 1us)})};
        for (int i = 0; i < 6; ++i) q.push(dt::make_region(20 * mib));
        for (const auto& [left, next] : drains_inside(q, 0.0)) {
            REQUIRE(next.op == call_kind::unmap);  // the step the drain stopped at, run by drain(1ns)
            CHECK(cost_of(next, 0.0) > left);
        }
    }
    SUBCASE("with closes too long for any budget, what runs next would not have fitted either") {
        // The next step is a close set aside (it did not fit when set aside, with more budget left)
        // or the munmap the drain stopped at.
        scripted_costs();
        scripted_queue q{inline_mode({.first_step_ns_per_byte = unmap_rate, .prior = exact_model()})};
        for (int i = 0; i < 6; ++i) q.push(dt::make_region(20 * mib));
        for (const auto& [left, next] : drains_inside(q, close_rate)) CHECK(cost_of(next, close_rate) > left);
    }
}

// Six 3 MiB pools: each a 151 us munmap and a 451 us close, against drains of 500 us.
struct close_heavy_burst {
    static constexpr auto budget = 500us;
    static constexpr int pools = 6;
    static constexpr auto per_pool = 602us;
};

TEST_CASE("queue: a close that does not fit waits for the next drain while this one unmaps the next pool") {
    scripted_costs();
    scripted_queue q{inline_mode({.first_step_ns_per_byte = unmap_rate, .prior = exact_model()})};
    std::vector<const void*> addrs;
    std::vector<int> fds;
    for (int i = 0; i < close_heavy_burst::pools; ++i) {
        auto region = dt::make_region(3 * mib);
        addrs.push_back(region.data());
        fds.push_back(region.fd());
        q.push(std::move(region));
    }
    const std::size_t seen = dt::script().calls().size();
    const auto first = q.drain(close_heavy_burst::budget);
    CHECK(first.steps == 2);  // the second pool's munmap, not an empty rest of the budget
    CHECK(first.fds_closed == 0);
    CHECK(first.elapsed <= close_heavy_burst::budget);
    CHECK(q.pending_bytes() == 4 * 3 * mib);
    const auto second = q.drain(close_heavy_burst::budget);
    REQUIRE(second.steps >= 1);
    REQUIRE(dt::script().calls()[seen + 2].op == call_kind::close);
    CHECK(dt::script().calls()[seen + 2].fd == fds[0]);  // the waiting close goes first
    int drains = 2;
    while (!q.empty()) {
        const auto report = q.drain(close_heavy_burst::budget);
        if (report.steps > 1) CHECK(report.elapsed <= close_heavy_burst::budget);
        ++drains;
    }
    // Closes in push order, each after its pool's munmap, munmaps in push order too.
    std::vector<int> closes;
    std::vector<const void*> unmaps;
    for (const auto& c : dt::script().calls()) {
        if (c.op == call_kind::close) closes.push_back(c.fd);
        if (c.op == call_kind::unmap) {
            unmaps.push_back(c.addr);
            CHECK(closes.size() < unmaps.size());
        }
    }
    CHECK(closes == fds);
    CHECK(unmaps == addrs);
    // Within 1.2 x work / budget + 2 drains: one close and one munmap a drain (two drains a pool) would
    // take 12.
    const double work = close_heavy_burst::pools * std::chrono::duration<double>(close_heavy_burst::per_pool) /
                        std::chrono::duration<double>(close_heavy_burst::budget);
    CHECK(drains <= static_cast<int>(1.2 * work + 2.0));
}

TEST_CASE("queue: pools pushed as a mapping and then a descriptor are never closed before unmapped") {
    // As the KWin and wlroots ports push them: each pool's mapping, then its descriptor with the
    // pool's size as the close's hint, so the closes do not fit beside a munmap and are set aside.
    scripted_costs();
    scripted_queue q{inline_mode({.first_step_ns_per_byte = unmap_rate, .prior = exact_model()})};
    std::vector<const void*> addrs;
    std::vector<int> fds;
    for (int i = 0; i < close_heavy_burst::pools; ++i) {
        auto [fd, map] = dt::make_region(3 * mib).release();
        addrs.push_back(map.data());
        fds.push_back(fd.get());
        q.push(std::move(map));
        q.push(std::move(fd), 3 * mib);
    }
    std::size_t set_aside = 0;
    while (!q.empty()) {
        const auto report = q.drain(close_heavy_burst::budget);
        set_aside += report.fds_closed == 0 && report.bytes_unmapped > 3 * mib ? 1 : 0;
    }
    CHECK(set_aside > 0);  // some drain went past a close to the next pool's munmap
    std::size_t unmapped = 0;
    std::vector<int> closes;
    for (const auto& c : dt::script().calls()) {
        if (c.op == call_kind::unmap) ++unmapped;
        if (c.op != call_kind::close) continue;
        closes.push_back(c.fd);
        CHECK(unmapped >= closes.size());  // pool i's mapping (pushed before its fd) is already gone
    }
    CHECK(closes == fds);
    CHECK(dt::script().open_fds() == 0);
    CHECK(dt::script().mapped_bytes() == 0);
}

std::vector<int> closes_made_by(std::thread::id thread) {
    std::vector<int> fds;
    for (const auto& c : dt::script().calls())
        if (c.op == call_kind::close && c.thread == thread) fds.push_back(c.fd);
    return fds;
}

TEST_CASE("queue: a newer close that would fit still waits for the close set aside") {
    scripted_costs();
    scripted_queue q{inline_mode({.first_step_ns_per_byte = unmap_rate, .prior = exact_model()})};
    auto big = dt::make_region(3 * mib);
    auto small = dt::make_region(64 * 1024);
    const int big_fd = big.fd();
    const int small_fd = small.fd();
    q.push(std::move(big));
    q.push(std::move(small));
    const auto first = q.drain(close_heavy_burst::budget);
    CHECK(first.steps == 2);
    CHECK(first.fds_closed == 0);  // the small pool's ~10 us close fits, but the big one's goes first
    CHECK(q.drain(close_heavy_burst::budget).fds_closed == 2);
    CHECK(closes_made_by(std::this_thread::get_id()) == std::vector<int>{big_fd, small_fd});
}

TEST_CASE("queue: drain_until goes on unmapping while the close set aside fits no better") {
    scripted_costs();
    scripted_queue q{inline_mode({.first_step_ns_per_byte = unmap_rate, .prior = exact_model()})};
    q.push(dt::make_region(3 * mib));
    q.push(dt::make_region(20 * mib));
    // The first pool's munmap takes ~151 us; the second pool's go in six even steps of ~168 us.
    const auto first = q.drain_until(dt::manual_clock::now() + 300us);
    CHECK(first.steps == 1);  // the first pool's munmap; its 451 us close is set aside
    const auto second = q.drain_until(dt::manual_clock::now() + 300us);
    CHECK(second.steps >= 1);  // the close still does not fit, the second pool's steps do
    CHECK(second.fds_closed == 0);
    CHECK(second.bytes_unmapped > 0);
    const std::size_t seen = dt::script().calls().size();
    CHECK(q.drain(1ms).fds_closed == 1);
    CHECK(dt::script().calls()[seen].op == call_kind::close);  // a drain's first step is free: the waiting close goes first
}

TEST_CASE("queue: close_on_worker, a close the full worker cannot take and that does not fit is set aside") {
    auto& os = scripted_costs();
    const auto me = std::this_thread::get_id();
    std::atomic<bool> blocked{false};
    std::atomic<bool> release{false};
    // The worker's first close fails and its error callback holds the worker until released.
    os.fail = [&](const dt::os_call& c) { return c.op == call_kind::close && c.thread != me && !blocked ? EIO : 0; };
    du::reclaim_options options;
    options.initial_capacity = 16;
    options.first_step_ns_per_byte = unmap_rate;
    options.prior = exact_model();
    options.on_error = [&](const du::reclaim_error&) {
        blocked = true;
        while (!release) std::this_thread::yield();
    };
    int big_fd = -1;
    int small_fd = -1;
    std::vector<int> mine;
    {
        scripted_queue q{std::move(options)};
        q.push(dt::scripted_fd{os.open_fd()});
        REQUIRE(q.drain(1ms).fds_handed_off == 1);
        while (!blocked) std::this_thread::yield();
        for (int i = 0; i < 16; ++i) q.push(dt::scripted_fd{os.open_fd()});
        REQUIRE(q.drain(1ms).fds_handed_off == 16);  // the worker's ring is full now
        auto big = dt::make_region(3 * mib);
        auto small = dt::make_region(64 * 1024);
        big_fd = big.fd();
        small_fd = small.fd();
        q.push(std::move(big));
        q.push(std::move(small));
        {
            const dt::allocation_failure no_heap;  // the worker's ring cannot grow: no hand-off
            const auto first = q.drain(close_heavy_burst::budget);
            CHECK(first.steps == 2);
            CHECK(first.fds_closed == 0);
            CHECK(first.fds_handed_off == 0);
            CHECK(q.pending_items() == 19);
            CHECK(q.next_deadline() != scripted_queue::time_point::max());
            CHECK(q.drain(close_heavy_burst::budget).fds_closed == 2);
        }
        mine = closes_made_by(me);
        release = true;
        q.flush();
        CHECK(q.empty());
    }
    CHECK(mine == std::vector<int>{big_fd, small_fd});
    CHECK(dt::script().open_fds() == 0);
    CHECK(dt::script().misuse() == 0);
}

TEST_CASE("queue: a close waiting for the next drain keeps next_deadline and pending_items") {
    scripted_costs();
    scripted_queue q{inline_mode({.first_step_ns_per_byte = unmap_rate, .max_delay = 100ms, .prior = exact_model()})};
    auto region = dt::make_region(3 * mib);
    const int fd = region.fd();
    q.push(std::move(region));
    auto bare = dt::make_region(3 * mib);
    auto [bare_fd, bare_map] = bare.release();
    q.push(std::move(bare_map));  // done once unmapped: nothing of it waits
    const auto start = dt::manual_clock::now();
    const auto report = q.drain(close_heavy_burst::budget);
    REQUIRE(report.steps == 2);
    CHECK(report.bytes_unmapped == 6 * mib);
    CHECK(q.pending_items() == 1);
    CHECK(!q.empty());
    CHECK(q.next_deadline() == start + 100ms);
    CHECK(q.stats().items_reclaimed == 1);
    dt::manual_clock::advance(100ms);
    CHECK(q.drain(4ms).fds_closed == 1);
    CHECK(dt::script().calls().back().fd == fd);
    CHECK(q.empty());
    CHECK(q.next_deadline() == scripted_queue::time_point::max());
}

TEST_CASE("queue: overshoot is at most one step when the model underestimates") {
    auto& os = scripted_costs();
    os.unmap_ns_per_byte = unmap_rate * 4;  // the machine is four times slower than the prior says
    scripted_queue q{inline_mode({.first_step_ns_per_byte = unmap_rate, .prior = exact_model()})};
    for (int i = 0; i < 4; ++i) q.push(dt::make_region(20 * mib));
    const std::size_t seen = dt::script().calls().size();
    const auto report = q.drain(500us);
    std::chrono::nanoseconds largest{0};
    const auto calls = dt::script().calls();
    for (std::size_t i = seen; i < calls.size(); ++i)
        largest = std::max(largest, 1us + std::chrono::nanoseconds{static_cast<std::int64_t>(os.unmap_ns_per_byte * static_cast<double>(calls[i].length))});
    CHECK(report.steps >= 1);
    CHECK(report.elapsed <= 500us + largest);
}

TEST_CASE("queue: the first step always runs, however small the budget") {
    scripted_costs();
    scripted_queue q{inline_mode({.first_step_ns_per_byte = unmap_rate, .prior = exact_model()})};
    q.push(du::basic_unique_fd<dt::scripted_os>{dt::script().open_fd(20 * mib)}, 20 * mib);  // a 3 ms close
    const auto report = q.drain(1ns);
    CHECK(report.steps == 1);
    CHECK(report.fds_closed == 1);
    CHECK(report.elapsed > 1ms);
    CHECK(q.empty());
}

TEST_CASE("queue: the cost model converges to what the steps cost") {
    auto& os = scripted_costs();
    os.unmap_ns_per_byte = unmap_rate * 3;
    os.close_ns_per_byte = close_rate / 2;
    scripted_queue q{inline_mode()};  // default priors, far from these costs
    for (int i = 0; i < 40; ++i) q.push(dt::make_region(20 * mib));
    while (!q.empty()) q.drain(1ms);
    const auto model = q.model();
    CHECK(model.unmap_ns_per_byte == doctest::Approx(os.unmap_ns_per_byte).epsilon(0.01));
    CHECK(model.close_ns_per_byte == doctest::Approx(os.close_ns_per_byte).epsilon(0.01));
}

TEST_CASE("queue: work is cut into page-aligned chunks of at most unmap_chunk_bytes") {
    scripted_costs();
    scripted_queue q{inline_mode({.unmap_chunk_bytes = 2 * mib, .max_step = 1ms})};  // the chunk binds, not max_step
    auto region = dt::make_region(5 * mib + 100);
    auto* base = static_cast<std::byte*>(region.data());
    q.push(std::move(region));
    q.flush();
    const auto calls = dt::script().calls();
    REQUIRE(calls.size() == 5);  // map, 3 unmaps, close
    CHECK(calls[1].addr == base);
    CHECK(calls[1].length == 2 * mib);
    CHECK(calls[2].addr == base + 2 * mib);
    CHECK(calls[3].addr == base + 4 * mib);
    CHECK(calls[3].length == mib + du::detail::page_size());
    CHECK(calls[4].op == call_kind::close);
    CHECK(q.stats().bytes_unmapped == 5 * mib + du::detail::page_size());
}

TEST_CASE("queue: an odd chunk size is rounded up to whole pages") {
    scripted_costs();
    scripted_queue q{inline_mode({.unmap_chunk_bytes = 5000})};
    q.push(dt::make_region(4 * du::detail::page_size()));
    q.flush();
    CHECK(dt::script().count(call_kind::unmap) == 2);
    CHECK(dt::script().misuse() == 0);
}

TEST_CASE("queue: the report says what one drain did and what is left") {
    scripted_costs();
    scripted_queue q{inline_mode(two_mib_steps({.first_step_ns_per_byte = unmap_rate, .prior = exact_model()}))};
    q.push(dt::make_region(4 * mib));
    q.push(dt::make_region(4 * mib));
    const auto report = q.drain(10ms);
    CHECK(report.steps == 6);
    CHECK(report.bytes_unmapped == 8 * mib);
    CHECK(report.fds_closed == 2);
    CHECK(report.errors == 0);
    CHECK(report.pending_bytes == 0);
    CHECK(report.pending_items == 0);
    CHECK(report.elapsed == 6us + 8 * 50us + 8 * 150us);
}

namespace {

// A model and a script that agree: `rate` ns per byte unmapped, 1 us per call.
du::cost_model unmap_model(double rate) {
    du::cost_model m = exact_model();
    m.unmap_ns_per_byte = rate;
    return m;
}

// The lengths of the unmap calls made since the script had `seen` calls.
std::vector<std::size_t> unmap_lengths(std::size_t seen) {
    std::vector<std::size_t> lengths;
    const auto calls = dt::script().calls();
    for (std::size_t i = seen; i < calls.size(); ++i)
        if (calls[i].op == call_kind::unmap) lengths.push_back(calls[i].length);
    return lengths;
}

// A pool (20 MiB unless said) torn down in one 10 ms drain on a fast scripted machine (5 us per MiB,
// 20 MiB in ~100 us) whose steps unmap_chunk_bytes caps at `cap`; the munmap lengths it made.
std::vector<std::size_t> fast_machine_steps(std::size_t cap, std::size_t pool = 20 * mib) {
    constexpr double fast = 5'000.0 / static_cast<double>(mib);
    scripted_costs().unmap_ns_per_byte = fast;
    scripted_queue q{inline_mode({.unmap_chunk_bytes = cap, .first_step_ns_per_byte = fast, .prior = unmap_model(fast)})};
    q.push(dt::make_region(pool));
    q.drain(10ms);
    CHECK(q.empty());
    return unmap_lengths(0);
}

}  // namespace

TEST_CASE("queue: on a fast machine a whole 20 MiB pool goes in one munmap step") {
    CHECK(fast_machine_steps(64 * mib) == std::vector<std::size_t>{20 * mib});
}

TEST_CASE("queue: on a slow machine steps are cut so each is predicted, and measured, within max_step") {
    constexpr double slow = 0.5;  // ~524 us per MiB: a 2 MiB chunk would hold mmap_lock for ~1 ms
    auto& os = scripted_costs();
    os.unmap_ns_per_byte = slow;
    const auto model = unmap_model(slow);
    scripted_queue q{inline_mode({.max_step = 200us, .first_step_ns_per_byte = model.unmap_ns_per_byte, .prior = model})};
    q.push(dt::make_region(4 * mib));
    while (!q.empty()) q.drain(1ms);
    const auto lengths = unmap_lengths(0);
    const std::size_t page = du::detail::page_size();
    // At most floor((200 us - 1 us) / 0.5 ns) bytes, in whole pages: as few steps as that allows.
    const std::size_t fit = 398'000 / page * page;
    REQUIRE(lengths.size() == (4 * mib + fit - 1) / fit);
    for (const std::size_t length : lengths) {
        CHECK(length % page == 0);
        CHECK(length <= fit);
        CHECK(model.predict_unmap(length) <= 200us);
        CHECK(cost_of({call_kind::unmap, nullptr, length}) <= 200us);
    }
    const auto [shortest, longest] = std::minmax_element(lengths.begin(), lengths.end());
    CHECK(*longest - *shortest <= page);
    CHECK(q.stats().bytes_unmapped == 4 * mib);
}

namespace {

// The munmap steps, past the first `warm_up`, whose scripted cost ran over 200 us, on a machine whose
// munmap alternates between 0.8 and 1.2 times 50 us per MiB (the mean the model starts from), a
// 20 MiB pool at a time, with max_step 200 us and `deviations`; `model` is what the queue learned.
std::size_t steps_over_200us(double deviations, std::size_t warm_up, du::cost_model& model) {
    auto& os = scripted_costs();
    std::vector<std::chrono::nanoseconds> costs;
    os.cost = [&costs](const dt::os_call& c) {
        if (c.op != call_kind::unmap) return cost_of(c);
        const double factor = costs.size() % 2 == 0 ? 0.8 : 1.2;
        costs.push_back(1us + std::chrono::nanoseconds{static_cast<std::int64_t>(factor * unmap_rate * static_cast<double>(c.length))});
        return costs.back();
    };
    scripted_queue q{inline_mode({.max_step = 200us, .max_step_deviations = deviations, .first_step_ns_per_byte = unmap_rate, .prior = exact_model()})};
    for (int i = 0; i < 20; ++i) q.push(dt::make_region(20 * mib));
    while (!q.empty()) q.drain(1ms);
    model = q.model();
    os.cost = nullptr;
    REQUIRE(costs.size() > warm_up);
    return static_cast<std::size_t>(std::count_if(costs.begin() + static_cast<std::ptrdiff_t>(warm_up), costs.end(),
                                                  [](std::chrono::nanoseconds c) { return c > 200us; }));
}

}  // namespace

TEST_CASE("queue: where munmap cost varies from call to call, steps leave room in max_step for the slow calls") {
    du::cost_model learned;
    // Sized by the learned spread (the default), no step past the first few runs over max_step...
    CHECK(steps_over_200us(du::reclaim_options{}.max_step_deviations, 8, learned) == 0);
    // Half the swing (0.2 of the rate) and a little more, as the learned mean lags the alternation.
    CHECK(learned.unmap_deviation_ns_per_byte >= 0.2 * unmap_rate);
    CHECK(learned.unmap_deviation_ns_per_byte <= 0.25 * unmap_rate);
    // ...while sized by the mean, every slow call does.
    CHECK(steps_over_200us(0.0, 8, learned) > 10);
}

TEST_CASE("queue: a pool a little longer than two steps goes in three even steps, not two and a sliver") {
    scripted_costs();  // 50 us per MiB: ~4 MiB fit in max_step 200 us
    const std::size_t page = du::detail::page_size();
    const std::size_t fit = du::detail::step_bytes(1us, unmap_rate, 200us, page);
    const std::size_t length = 2 * fit + 4 * page;
    scripted_queue q{inline_mode({.max_step = 200us, .first_step_ns_per_byte = unmap_rate, .prior = exact_model()})};
    q.push(dt::make_region(length));
    while (!q.empty()) q.drain(1ms);
    const auto lengths = unmap_lengths(0);
    REQUIRE(lengths.size() == 3);
    const auto [shortest, longest] = std::minmax_element(lengths.begin(), lengths.end());
    CHECK(*longest - *shortest <= page);
    CHECK(*longest <= fit);
    CHECK(q.stats().bytes_unmapped == length);
}

TEST_CASE("queue: unmap_chunk_bytes still caps a step the model would let run longer") {
    CHECK(fast_machine_steps(2 * mib) == std::vector<std::size_t>(10, 2 * mib));
}

TEST_CASE("queue: where unmap_chunk_bytes binds, steps keep its size and the last takes what is left") {
    auto expected = std::vector<std::size_t>(10, 2 * mib);
    expected.push_back(mib);
    CHECK(fast_machine_steps(2 * mib, 21 * mib) == expected);
}

TEST_CASE("queue: even steps are whole pages, within a page of each other, as few as fit allows") {
    const std::size_t page = du::detail::page_size();
    const auto steps_for = [page](std::size_t left, std::size_t fit) {
        std::vector<std::size_t> steps;
        while (left > 0) {
            steps.push_back(du::detail::even_step_bytes(left, fit, page));
            left -= steps.back();
        }
        return steps;
    };
    CHECK(steps_for(10 * page, 4 * page) == std::vector<std::size_t>{4 * page, 3 * page, 3 * page});
    CHECK(steps_for(8 * page, 4 * page) == std::vector<std::size_t>{4 * page, 4 * page});
    CHECK(steps_for(9 * page, 4 * page) == std::vector<std::size_t>{3 * page, 3 * page, 3 * page});
    CHECK(steps_for(3 * page, 4 * page) == std::vector<std::size_t>{3 * page});
    CHECK(steps_for(3 * page, page / 2) == std::vector<std::size_t>(3, page));  // under a page counts as one
    CHECK(du::detail::even_step_bytes(page / 2, page / 4, page) == page / 2);  // no division by zero pages
}

TEST_CASE("queue: a step is never shorter than one page, however slow the model") {
    const std::size_t page = du::detail::page_size();
    CHECK(du::detail::step_bytes(unmap_model(1e6).call_overhead, 1e6, 200us, page) == page);
    CHECK(du::detail::step_bytes(1ms, unmap_rate, 200us, page) == page);  // the overhead alone exceeds max_step
    // A zero rate: any length fits, so the cap (unmap_chunk_bytes, what is left) decides.
    CHECK(du::detail::step_bytes(1us, 0.0, 200us, page) % page == 0);
    CHECK(du::detail::step_bytes(1us, 0.0, 200us, page) >= (std::size_t{1} << 40));
}

TEST_CASE("options: a max_step that is not positive is refused") {
    CHECK(!du::validate(du::reclaim_options{}));
    CHECK(du::validate(du::reclaim_options{.max_step = 0ns}) == std::errc::invalid_argument);
    CHECK(du::validate(du::reclaim_options{.max_step = -1us}) == std::errc::invalid_argument);
}

TEST_CASE("queue: a preempted step does not change the model, but its wall time is still spent") {
    // 3/64 ns per byte is exact in binary, so a step that costs what the model predicts leaves it
    // bit-for-bit unchanged: a 2 MiB step costs 1 us + 98.304 us of CPU, ~0.1 ms.
    constexpr double rate = 3.0 / 64.0;
    auto& os = scripted_costs();
    os.unmap_ns_per_byte = rate;
    const auto model = unmap_model(rate);
    scripted_queue q{inline_mode({.unmap_chunk_bytes = 2 * mib, .first_step_ns_per_byte = model.unmap_ns_per_byte, .prior = model})};
    q.push(dt::make_region(4 * mib));
    os.preempt = 50ms - 99'304ns;  // the step takes 50 ms of wall time, ~0.1 ms of it on the CPU
    const auto report = q.drain(1ns);
    os.preempt = 0ns;
    REQUIRE(report.steps == 1);
    CHECK(report.elapsed >= 50ms);  // budgets are wall time
    CHECK(q.model().unmap_ns_per_byte == model.unmap_ns_per_byte);
    CHECK(q.model().unmap_deviation_ns_per_byte == 0.0);  // nor does it widen the room left for slow steps
    CHECK(q.model().call_overhead == model.call_overhead);
    // The same step unpreempted but twice as slow on the CPU does move the model: the test can fail.
    os.unmap_ns_per_byte = 2 * rate;
    q.drain(1ns);
    CHECK(q.model().unmap_ns_per_byte > model.unmap_ns_per_byte);
}

TEST_CASE("stats: each munmap step's prediction error is recorded, and any step over max_step counted") {
    constexpr double rate = 3.0 / 64.0;  // exact in binary: a step costing what was predicted errs by 0
    auto& os = scripted_costs();
    os.unmap_ns_per_byte = rate;
    scripted_queue q{inline_mode({.max_step = 200us, .first_step_ns_per_byte = rate, .prior = unmap_model(rate)})};
    q.push(dt::make_region(20 * mib));
    REQUIRE(q.drain(1ns).steps == 1);
    auto stats = q.stats();
    CHECK(stats.unmap_prediction_error.count() == 1);
    CHECK(stats.unmap_prediction_error.max() == 0ns);
    CHECK(stats.unmap_steps_over_max_step == 0);

    os.unmap_ns_per_byte = 3 * rate;  // the machine slows to three times what the model knows
    REQUIRE(q.drain(1ns).steps == 1);
    const std::size_t length = unmap_lengths(0).back();
    const auto predicted = unmap_model(rate).predict_unmap(length);
    CHECK(predicted <= 200us);
    stats = q.stats();
    CHECK(stats.unmap_prediction_error.count() == 2);
    // It cost 1 us + 3 * rate * length against a prediction of 1 us + rate * length.
    const auto error = std::chrono::nanoseconds{static_cast<std::int64_t>(2 * rate * static_cast<double>(length))};
    CHECK(stats.unmap_prediction_error.max() == error);
    CHECK(stats.unmap_steps_over_max_step == 1);
}

TEST_CASE("stats: a pool's first step is held to the model's prediction, not to the cautious rate it was sized at") {
    constexpr double rate = 3.0 / 64.0;  // exact in binary, as above
    scripted_costs().unmap_ns_per_byte = rate;
    scripted_queue q{inline_mode({.max_step = 200us, .first_step_ns_per_byte = 4 * rate, .prior = unmap_model(rate)})};
    q.push(dt::make_region(20 * mib));
    REQUIRE(q.drain(1ns).steps == 1);  // sized at 4x the rate, it costs what the model predicts
    CHECK(q.stats().unmap_prediction_error.count() == 1);
    CHECK(q.stats().unmap_prediction_error.max() == 0ns);
}

TEST_CASE("stats: a pool's later steps are held to its own rate, not to the mean cheaper pools taught") {
    constexpr double rate = 3.0 / 64.0;  // exact in binary, as above
    auto& os = scripted_costs();
    os.unmap_ns_per_byte = rate;
    scripted_queue q{inline_mode({.max_step = 200us, .first_step_ns_per_byte = rate, .prior = unmap_model(rate)})};
    q.push(dt::make_region(20 * mib));
    q.flush();
    os.unmap_ns_per_byte = 4 * rate;  // the next pool is four times dearer
    q.push(dt::make_region(20 * mib));
    REQUIRE(q.drain(1ns).steps == 1);  // its first step, predicted at the mean, teaches it its own rate
    const auto before = q.stats().unmap_prediction_error;
    for (int i = 0; i < 8; ++i) REQUIRE(q.drain(1ns).steps == 1);
    const auto after = q.stats().unmap_prediction_error;
    REQUIRE(after.count() == before.count() + 8);
    // Every later step costs what its own rate predicts: all eight land in the lowest bucket.
    CHECK(after.bucket(0) == before.bucket(0) + 8);
    q.flush();
}

TEST_CASE("stats: a failed chunk's fallback is not booked as a step-sizing miss") {
    auto& os = scripted_costs();
    os.fail = [failed = false](const dt::os_call& c) mutable {
        if (c.op != call_kind::unmap || failed) return 0;
        failed = true;
        return ENOMEM;  // the first chunk fails; its fallback unmaps the whole rest in one call
    };
    scripted_queue q{inline_mode({.unmap_chunk_bytes = 2 * mib, .max_step = 200us, .first_step_ns_per_byte = unmap_rate, .prior = exact_model()})};
    q.push(dt::make_region(20 * mib));
    REQUIRE(q.drain(1ns).steps == 1);
    const auto stats = q.stats();
    CHECK(stats.unmap_errors == 1);
    CHECK(stats.unmap_prediction_error.count() == 0);
    CHECK(stats.unmap_steps_over_max_step == 0);
}

TEST_CASE("stats: a preempted munmap step is neither a prediction error nor over max_step") {
    constexpr double rate = 3.0 / 64.0;  // exact in binary, as above
    auto& os = scripted_costs();
    os.unmap_ns_per_byte = rate;
    scripted_queue q{inline_mode({.max_step = 200us, .first_step_ns_per_byte = rate, .prior = unmap_model(rate)})};
    q.push(dt::make_region(20 * mib));
    os.preempt = 5ms;  // 5 ms of wall time in which the thread had no CPU
    REQUIRE(q.drain(1ns).steps == 1);
    os.preempt = 0ns;
    const auto stats = q.stats();
    CHECK(stats.step_durations.max() >= 5ms);
    CHECK(stats.unmap_prediction_error.max() == 0ns);
    CHECK(stats.unmap_steps_over_max_step == 0);
}

TEST_CASE("stats: every munmap step is booked once and no close is, inline and on the unmapping worker") {
    scripted_costs();
    {
        scripted_queue q{inline_mode(two_mib_steps({.first_step_ns_per_byte = unmap_rate, .prior = exact_model()}))};
        q.push(dt::make_region(5 * mib));
        q.flush();
        CHECK(dt::script().count(call_kind::unmap) == 3);
        CHECK(q.stats().unmap_prediction_error.count() == 3);
    }
    scripted_costs();
    {
        scripted_queue q{two_mib_steps({.first_step_ns_per_byte = unmap_rate, .unmap_on_worker = true, .worker_pause = 0ns, .prior = exact_model()})};
        q.push(dt::make_region(5 * mib));
        q.drain(0ns);
        q.flush();
        CHECK(dt::script().count(call_kind::unmap) == 3);
        CHECK(q.stats().unmap_prediction_error.count() == 3);
    }
}

TEST_CASE("testing: cpu_clock is per thread, and reset() zeroes every thread's") {
    dt::reset();
    dt::cpu_clock::advance(3ms);
    std::promise<void> advanced;
    std::promise<void> was_reset;
    auto other_advanced = advanced.get_future();
    std::thread other([&advanced, after = was_reset.get_future()] {
        CHECK(dt::cpu_clock::now() == 0ns);  // the test thread's 3 ms are not its own
        dt::cpu_clock::advance(1ms);
        CHECK(dt::cpu_clock::now() == 1ms);
        advanced.set_value();
        after.wait();
        CHECK(dt::cpu_clock::now() == 0ns);  // it ran across reset(), which zeroes it all the same
    });
    other_advanced.wait();
    CHECK(dt::cpu_clock::now() == 3ms);  // nor is the other thread's millisecond the test thread's
    dt::reset();
    was_reset.set_value();
    other.join();
    CHECK(dt::cpu_clock::now() == 0ns);
}

namespace {

struct munmap_gate {
    std::promise<void> entered;
    std::future<void> resume;
};

// scripted_os, but the first munmap after a gate is armed waits there once the script has charged it:
// the queue's step is still inside the call (its CPU clock read before it, not yet after) while the
// test's thread makes calls of its own. Held here, not in os_script::cost, which runs under the
// script's lock and would hold up every other thread's scripted call too.
struct gated_os : dt::scripted_os {
    static inline std::atomic<munmap_gate*> gate{nullptr};

    static int unmap(void* addr, std::size_t length) noexcept {
        const int result = dt::scripted_os::unmap(addr, length);
        if (munmap_gate* const held = gate.exchange(nullptr)) {
            held->entered.set_value();
            held->resume.wait();
        }
        return result;
    }
};

}  // namespace

TEST_CASE("queue: the unmapping worker learns from its own CPU time, not the draining thread's") {
    auto& os = scripted_costs();
    std::promise<void> resume;
    munmap_gate gate{{}, resume.get_future()};
    auto entered = gate.entered.get_future();
    gated_os::gate.store(&gate);
    du::basic_reclaim_queue<dt::manual_clock, gated_os> q{
        two_mib_steps({.first_step_ns_per_byte = unmap_rate, .unmap_on_worker = true, .worker_pause = 0ns, .prior = exact_model()})};
    q.push(make_region_for<gated_os>(4 * mib));  // two 2 MiB munmap steps and a close, all on the worker
    q.drain(1ms);
    const bool worker_inside = entered.wait_for(10s) == std::future_status::ready;
    // While the worker is inside its first munmap, the draining thread closes a 32 MiB memfd of its
    // own: ~4.8 ms of its CPU time.
    dt::scripted_fd own_pool{os.open_fd(32 * mib)};
    own_pool.reset();
    resume.set_value();  // before any REQUIRE: a worker held at the gate would hang the queue's flush
    REQUIRE(worker_inside);
    REQUIRE(q.wait_for_worker(10s));
    CHECK(os.count(call_kind::unmap) == 2);
    CHECK(os.count(call_kind::close) == 2);
    // Every step cost exactly what the prior predicts, so the model is unchanged, bit for bit.
    const auto model = q.model();
    CHECK(model.unmap_ns_per_byte == exact_model().unmap_ns_per_byte);
    CHECK(model.close_ns_per_byte == exact_model().close_ns_per_byte);
    CHECK(model.call_overhead == exact_model().call_overhead);
    const auto stats = q.stats();
    CHECK(stats.unmap_prediction_error.count() == 2);
    CHECK(stats.unmap_prediction_error.max() == 0ns);
    CHECK(stats.unmap_steps_over_max_step == 0);
}

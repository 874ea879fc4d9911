#include <doctest/doctest.h>

#include "test_support.hpp"

using namespace du_test;
using namespace std::chrono_literals;

TEST_CASE("histogram: buckets are at most a quarter octave wide") {
    du::duration_histogram h;
    for (const std::chrono::nanoseconds d : {100ns, 1500ns, 1000000ns, 3000000ns}) h.record(d);
    CHECK(h.count() == 4);
    CHECK(h.max() == 3ms);
    CHECK(h.total() == 100ns + 1500ns + 1ms + 3ms);
    CHECK(h.quantile(0.25) == du::duration_histogram::bucket_limit(0));
    const auto p75 = h.quantile(0.75);
    CHECK(p75 >= 1ms);
    CHECK(p75 <= 1250us);
    CHECK(h.quantile(1.0) == 3ms);
}

TEST_CASE("histogram: every limit grows and no value falls outside") {
    for (std::size_t i = 1; i < du::duration_histogram::bucket_count; ++i)
        CHECK(du::duration_histogram::bucket_limit(i) > du::duration_histogram::bucket_limit(i - 1));
    du::duration_histogram h;
    h.record(std::chrono::hours{10});
    h.record(-5ns);
    CHECK(h.bucket(du::duration_histogram::bucket_count - 1) == 1);
    CHECK(h.bucket(0) == 1);
}

TEST_CASE("histogram: an empty histogram answers zero") {
    const du::duration_histogram h;
    CHECK(h.quantile(0.99) == 0ns);
    CHECK(h.count() == 0);
}

TEST_CASE("queue: stats count pushes, drains, steps and the peak burst") {
    auto& os = dt::reset();
    os.call_overhead = 10us;
    scripted_queue q{inline_mode(two_mib_steps())};
    for (int i = 0; i < 3; ++i) q.push(dt::make_region(4 * mib));
    while (!q.empty()) q.drain(30us);
    const auto s = q.stats();
    CHECK(s.items_pushed == 3);
    CHECK(s.bytes_pushed == 12 * mib);
    CHECK(s.items_reclaimed == 3);
    CHECK(s.bytes_unmapped == 12 * mib);
    CHECK(s.fds_closed == 3);
    CHECK(s.steps == 9);
    CHECK(s.step_durations.count() == 9);
    CHECK(s.step_durations.max() == 10us);
    CHECK(s.drains == s.drain_durations.count());
    CHECK(s.drains >= 3);
    CHECK(s.peak_pending_items == 3);
    CHECK(s.peak_pending_bytes == 12 * mib);
}

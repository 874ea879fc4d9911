// The C options struct as callers built against other versions of c_api.h pass it: each field a caller
// does not know takes the library's default, whatever bytes lie beyond its size.
#include <deferred_unmap/c_api_impl.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>

namespace {

// Where du_queue_options ended in each earlier version of c_api.h.
constexpr std::size_t earlier_sizes[] = {
    offsetof(du_queue_options, low_priority_closes),
    offsetof(du_queue_options, max_step_ns),
    offsetof(du_queue_options, drain_pause_ns),
    offsetof(du_queue_options, max_step_deviations),
};

// As a caller built against the header that ended at `size` fills it: init, then garbage past its end.
du_queue* create_as_earlier_caller(std::size_t size) {
    du_queue_options opts;
    std::memset(&opts, 0xab, sizeof opts);
    du_queue_options_init_sized(&opts, size);
    opts.close_on_worker = 0;  // no thread needed to read the options back
    return du_queue_create_with(&opts);
}

}  // namespace

TEST_CASE("c api: a caller built against an earlier header gets the default of every later field") {
    const deferred_unmap::reclaim_options defaults;
    for (const std::size_t size : earlier_sizes) {
        CAPTURE(size);
        du_queue* q = create_as_earlier_caller(size);
        REQUIRE(q != nullptr);
        const deferred_unmap::reclaim_options& got = q->queue.options();
        if (size <= offsetof(du_queue_options, max_step_ns)) CHECK(got.max_step == defaults.max_step);
        if (size <= offsetof(du_queue_options, drain_pause_ns)) CHECK(got.drain_pause == defaults.drain_pause);
        CHECK(got.max_step_deviations == defaults.max_step_deviations);
        CHECK(got.max_step_deviations == 2.0);
        du_queue_destroy(q);
    }
}

TEST_CASE("c api: init fills a newer caller's unknown fields with zero, which create accepts") {
    struct newer {
        du_queue_options known;
        double unknown;
    } future;
    std::memset(&future, 0xff, sizeof future);
    du_queue_options_init_sized(&future.known, sizeof future);
    CHECK(future.known.size == sizeof future);
    CHECK(future.unknown == 0.0);
    du_queue* q = du_queue_create_with(&future.known);
    CHECK(q != nullptr);
    du_queue_destroy(q);
}

// The C options struct as callers built against earlier versions of c_api.h pass it: what they set is
// kept, and each field they do not know takes the library's default, whatever bytes lie beyond.
#include <deferred_unmap/c_api_impl.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace {

// Where du_queue_options ended in each earlier version of c_api.h.
constexpr std::size_t earlier_sizes[] = {
    offsetof(du_queue_options, max_step_ns),          // the first layout
    offsetof(du_queue_options, drain_pause_ns),       // + max_step_ns
    offsetof(du_queue_options, max_step_deviations),  // + drain_pause_ns
    offsetof(du_queue_options, max_pending_items),    // + max_step_deviations
    offsetof(du_queue_options, first_step_ns_per_byte),  // + max_pending_items
};

constexpr unsigned char garbage = 0xab;

bool untouched_past(const du_queue_options& opts, std::size_t size) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&opts);
    return std::all_of(bytes + size, bytes + sizeof opts, [](unsigned char b) { return b == garbage; });
}

}  // namespace

TEST_CASE("c api: a caller built against an earlier header keeps its fields, the later ones take defaults") {
    const deferred_unmap::reclaim_options defaults;
    for (const std::size_t size : earlier_sizes) {
        CAPTURE(size);
        du_queue_options opts;
        std::memset(&opts, garbage, sizeof opts);
        du_queue_options_init_sized(&opts, size);
        CHECK(untouched_past(opts, size));  // init writes nothing that caller does not own
        opts.close_on_worker = 0;
        opts.unmap_chunk_bytes = std::size_t{1} << 20;
        opts.worker_pause_ns = 7000;
        du_queue* q = du_queue_create_with(&opts);
        REQUIRE(q != nullptr);
        const deferred_unmap::reclaim_options& got = q->queue.options();
        CHECK_FALSE(got.close_on_worker);
        CHECK(got.unmap_chunk_bytes == std::size_t{1} << 20);
        CHECK(got.worker_pause == std::chrono::microseconds{7});
        if (size <= offsetof(du_queue_options, max_step_ns)) CHECK(got.max_step == defaults.max_step);
        if (size <= offsetof(du_queue_options, drain_pause_ns)) CHECK(got.drain_pause == defaults.drain_pause);
        CHECK(got.max_step_deviations == defaults.max_step_deviations);
        CHECK(got.first_step_ns_per_byte == defaults.first_step_ns_per_byte);
        du_queue_destroy(q);
    }
}

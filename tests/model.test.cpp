// Randomized model test: a million random pushes, drains, flushes, clock moves, injected faults and
// fresh queues with random options (drain_pause among them), each checked against the reference in
// fuzz/queue_harness.hpp.
//
// DU_MODEL_SEED=<n> replays a run (the seed is printed when a run fails); DU_MODEL_OPS=<n> sets its
// length. Runs in worker modes are checked exactly for order and accounting, but the interleaving of
// the worker's calls, and so a failure there, may not replay exactly.
#include <doctest/doctest.h>

#include "fuzz/queue_harness.hpp"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

namespace {

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 0) : fallback;
}

}  // namespace

TEST_CASE("model: every operation of a long random run matches the reference model") {
    const std::uint64_t seed = env_or("DU_MODEL_SEED", (std::uint64_t{std::random_device{}()} << 32U) ^ std::random_device{}());
    const std::uint64_t operations = env_or("DU_MODEL_OPS", 1'000'000);
    du_reliability::prng_source source{seed};
    du_reliability::harness<du_reliability::prng_source> run{source, seed ^ 0x5eedU};
    std::uint64_t done = 0;
    while (done < operations && run.step()) ++done;
    const bool passed = done == operations && run.finish();
    if (!passed) {
        std::printf("model test failed: replay with DU_MODEL_SEED=%llu (operation %llu): %s\n",
                    static_cast<unsigned long long>(seed), static_cast<unsigned long long>(done), run.failure().c_str());
    }
    CHECK_MESSAGE(passed, "DU_MODEL_SEED=", seed, " operation ", done, ": ", run.failure());
    const auto c = run.counts();
    std::printf("model: seed %llu, %llu operations, %llu queues, %llu items, %llu calls checked, "
                "%llu munmap faults, %llu close faults, %llu errors reported; drain_pause: %llu queues, %llu pauses checked "
                "(%llu cut short by the check after the sleep), %llu drain_until; %llu closes set aside; %llu calls seen by the order witness\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(c.operations),
                static_cast<unsigned long long>(c.queues), static_cast<unsigned long long>(c.items),
                static_cast<unsigned long long>(c.calls_checked), static_cast<unsigned long long>(c.unmap_faults),
                static_cast<unsigned long long>(c.close_faults), static_cast<unsigned long long>(c.errors_reported),
                static_cast<unsigned long long>(c.paused_queues), static_cast<unsigned long long>(c.pauses_checked),
                static_cast<unsigned long long>(c.pauses_cut), static_cast<unsigned long long>(c.drains_until),
                static_cast<unsigned long long>(c.closes_set_aside), static_cast<unsigned long long>(c.calls_witnessed));
}

// Found by the model test, kept as plain regressions.

TEST_CASE("model: a max_delay of forever means no deadline, not one in the distant past") {
    du_reliability::dt::reset();
    du_reliability::scripted_queue q{du_reliability::inline_mode({.max_delay = std::chrono::nanoseconds::max()})};
    q.push(du_reliability::dt::make_region(4096));
    CHECK(q.next_deadline() == du_reliability::dt::manual_clock::time_point::max());
}

TEST_CASE("model: an unmap_chunk_bytes past the last page multiple unmaps each mapping in one call") {
    // A max_step no step reaches, so the chunk alone sets the length.
    auto& os = du_reliability::dt::reset();
    du_reliability::scripted_queue q{du_reliability::inline_mode({.unmap_chunk_bytes = std::numeric_limits<std::size_t>::max(), .max_step = std::chrono::hours{1}})};
    q.push(du_reliability::dt::make_region(std::size_t{8} << 20U));
    q.flush();
    CHECK(os.count(du_reliability::call_kind::unmap) == 1);
}

TEST_CASE("model: a bogus size hint is predicted to take too long, not a negative time") {
    du_reliability::dt::reset();
    deferred_unmap::cost_model prior;
    prior.close_ns_per_byte = 1.0;
    du_reliability::scripted_queue q{du_reliability::inline_mode({.prior = prior})};
    q.push(du_reliability::dt::scripted_fd{du_reliability::dt::script().open_fd(4096)}, 4096);
    q.push(du_reliability::dt::scripted_fd{du_reliability::dt::script().open_fd(4096)}, std::numeric_limits<std::size_t>::max());
    const auto report = q.drain(std::chrono::milliseconds{1});
    CHECK(report.steps == 1);  // the second close is predicted at the one-day cap: it waits
    CHECK(report.pending_items == 1);
}

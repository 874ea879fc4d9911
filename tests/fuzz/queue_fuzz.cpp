// libFuzzer target: fuzzer bytes choose the operations (pushes, drains with budgets, flushes, clock
// moves, fault rates, fresh queues with options) that queue_harness.hpp checks against its reference.
// The first eight bytes seed the scripted OS's costs and failures. A divergence aborts with a message.
#include "queue_harness.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::uint64_t seed = 0;
    const std::size_t seed_bytes = std::min(size, sizeof seed);
    std::memcpy(&seed, data, seed_bytes);
    du_reliability::bytes_source source{data + seed_bytes, size - seed_bytes};
    du_reliability::harness<du_reliability::bytes_source> run{source, seed};
    constexpr int max_operations = 4096;  // keeps one input well under a second
    for (int i = 0; i < max_operations && !source.exhausted(); ++i) {
        if (!run.step()) break;
    }
    if (!run.failure().empty() || !run.finish()) {
        std::fprintf(stderr, "queue_fuzz: divergence from the reference model: %s\n", run.failure().c_str());
        std::abort();
    }
    return 0;
}

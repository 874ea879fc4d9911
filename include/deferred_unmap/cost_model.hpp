// deferred_unmap/cost_model.hpp - predicts what the next munmap or close will cost.
//
// Guarantees: predictions are fixed overhead + rate * bytes, with a separate rate for munmap and for
// close; learn() moves each rate a quarter of the way towards what a timed step showed, so the model
// follows the machine within a few steps and one outlier cannot dominate it. No allocation, no throw.
//
//   deferred_unmap::cost_model model;                      // priors measured on a 2-core VM
//   auto cost = model.predict_unmap(2 << 20);              // ~ 100 us
//   model.learn_unmap(2 << 20, std::chrono::microseconds{60});
//   deferred_unmap::reclaim_queue q{{.prior = model}};     // start from a tuned model
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace deferred_unmap {

struct cost_model {
    /// Priors: freeing a 19.8 MiB memfd pool with 4 KiB folios costs ~0.9 ms of munmap and ~2.7 ms of
    /// close on a 2-core VM (a desktop is ~4x faster). Erring high only makes the first drains cautious.
    double unmap_ns_per_byte = 0.05;
    double close_ns_per_byte = 0.15;
    /// Cost of a call that frees nothing (syscall entry, VMA lookup); not learned.
    std::chrono::nanoseconds call_overhead{2000};

    [[nodiscard]] std::chrono::nanoseconds predict_unmap(std::size_t bytes) const noexcept {
        return call_overhead + scaled(unmap_ns_per_byte, bytes);
    }
    [[nodiscard]] std::chrono::nanoseconds predict_close(std::size_t bytes) const noexcept {
        return call_overhead + scaled(close_ns_per_byte, bytes);
    }

    void learn_unmap(std::size_t bytes, std::chrono::nanoseconds took) noexcept { learn(unmap_ns_per_byte, bytes, took); }
    void learn_close(std::size_t bytes, std::chrono::nanoseconds took) noexcept { learn(close_ns_per_byte, bytes, took); }

private:
    /// Steps smaller than this are dominated by call overhead and say little about the rate.
    static constexpr std::size_t min_learn_bytes = std::size_t{64} * 1024;
    static constexpr double learn_weight = 0.25;

    static std::chrono::nanoseconds scaled(double rate, std::size_t bytes) noexcept {
        // Capped at a day: a bogus size hint must not overflow the conversion or drain's sums, and a
        // step predicted to take a day fits no budget anyway.
        constexpr double day_ns = 86'400e9;
        const double ns = std::min(rate * static_cast<double>(bytes), day_ns);
        return std::chrono::nanoseconds{static_cast<std::chrono::nanoseconds::rep>(ns)};
    }

    void learn(double& rate, std::size_t bytes, std::chrono::nanoseconds took) const noexcept {
        if (bytes < min_learn_bytes) return;
        const auto freeing = std::max(took - call_overhead, std::chrono::nanoseconds{0});
        const double observed = static_cast<double>(freeing.count()) / static_cast<double>(bytes);
        rate += learn_weight * (observed - rate);
    }
};

}  // namespace deferred_unmap

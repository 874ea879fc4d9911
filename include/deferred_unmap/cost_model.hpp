// deferred_unmap/cost_model.hpp - predicts what the next munmap or close will cost.
//
// Guarantees: predictions are fixed overhead + rate * bytes, with a separate rate for munmap and for
// close. learn() moves a rate a quarter of the way towards what a timed step showed, after clamping
// that observation to within 2x of the current rate: one outlier (a preempted step, a page fault storm)
// moves a prediction by at most 25%, so it costs at most one frame's worth of caution, while a real
// change of speed is followed within a few steps. Beside the munmap rate it learns how far the rate
// strays (a mean deviation, as TCP learns a round trip's, RFC 6298), so a step can be sized for a
// slow call and not only for the average one. No allocation, no throw.
//
//   deferred_unmap::cost_model model;                      // priors measured on a 2-core VM
//   auto cost = model.predict_unmap(2 << 20);              // ~ 100 us
//   model.learn_unmap(2 << 20, std::chrono::microseconds{60});
//   deferred_unmap::reclaim_queue q{{.prior = model}};     // start from a tuned model
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>

namespace deferred_unmap {

struct cost_model {
    /// Priors: tearing down a 19.8 MiB memfd pool with 4 KiB folios, mapping first, costs ~0.9 ms of
    /// munmap and ~2.7 ms of close (which frees the pages) on a 2-core VM (a desktop is ~4x faster).
    /// Erring high only makes the first drains cautious. Each pool's first step is sized at
    /// reclaim_options::first_step_ns_per_byte or slower, whatever this says.
    double unmap_ns_per_byte = 0.05;
    double close_ns_per_byte = 0.15;
    /// Cost of a call that frees nothing (syscall entry, VMA lookup); not learned.
    std::chrono::nanoseconds call_overhead{2000};
    /// How far one munmap's rate strays from unmap_ns_per_byte: the mean absolute deviation, learned
    /// from the steps within 2x of the rate. Zero in the prior, whose rate is already high.
    double unmap_deviation_ns_per_byte = 0.0;

    /// True when both rates and the deviation are finite and non-negative and the overhead lies
    /// between zero and a day: the only models a queue accepts as its prior. O(1).
    [[nodiscard]] bool valid() const noexcept {
        return valid_rate(unmap_ns_per_byte) && valid_rate(close_ns_per_byte) && valid_rate(unmap_deviation_ns_per_byte) &&
               call_overhead.count() >= 0 && call_overhead <= std::chrono::nanoseconds{std::chrono::hours{24}};
    }

    /// The munmap rate `deviations` learned deviations above the mean: the rate a slow call runs at,
    /// which reclaim_options::max_step_deviations sizes steps by. O(1).
    [[nodiscard]] double unmap_ns_per_byte_high(double deviations) const noexcept {
        return unmap_ns_per_byte + deviations * unmap_deviation_ns_per_byte;
    }

    [[nodiscard]] std::chrono::nanoseconds predict_unmap(std::size_t bytes) const noexcept {
        return call_overhead + scaled(unmap_ns_per_byte, bytes);
    }
    [[nodiscard]] std::chrono::nanoseconds predict_close(std::size_t bytes) const noexcept {
        return call_overhead + scaled(close_ns_per_byte, bytes);
    }

    void learn_unmap(std::size_t bytes, std::chrono::nanoseconds took) noexcept {
        learn(unmap_ns_per_byte, &unmap_deviation_ns_per_byte, bytes, took);
    }
    void learn_close(std::size_t bytes, std::chrono::nanoseconds took) noexcept { learn(close_ns_per_byte, nullptr, bytes, took); }

    /// The per-byte rate one munmap or close of `bytes` that took `took` showed, net of call_overhead;
    /// -1 for a step too small to say (under 64 KiB, where the call overhead dominates). O(1).
    [[nodiscard]] double observed_rate(std::size_t bytes, std::chrono::nanoseconds took) const noexcept {
        if (bytes < min_learn_bytes) return -1.0;
        const auto freeing = std::max(took - call_overhead, std::chrono::nanoseconds{0});
        return static_cast<double>(freeing.count()) / static_cast<double>(bytes);
    }

private:
    /// Steps smaller than this are dominated by call overhead and say little about the rate.
    static constexpr std::size_t min_learn_bytes = std::size_t{64} * 1024;
    static constexpr double learn_weight = 0.25;
    /// How far one observation may pull: at most this factor above or below the current rate.
    static constexpr double max_jump = 2.0;
    /// The clamp's floor, so a rate that reached zero can still learn (1 us per GB).
    static constexpr double min_rate = 1e-6;

    static bool valid_rate(double rate) noexcept { return std::isfinite(rate) && rate >= 0.0; }

    static std::chrono::nanoseconds scaled(double rate, std::size_t bytes) noexcept {
        // Capped at a day: a bogus size hint must not overflow the conversion or drain's sums, and a
        // step predicted to take a day fits no budget anyway.
        constexpr double day_ns = 86'400e9;
        const double ns = std::min(rate * static_cast<double>(bytes), day_ns);
        return std::chrono::nanoseconds{static_cast<std::chrono::nanoseconds::rep>(ns)};
    }

    // The deviation learns from the miss against the rate before this step moved it, but not from
    // an observation the clamp cut: those come while the rate runs down from a high prior or up to a
    // new speed, every miss the same way, and counted as spread they would make steps timid for a
    // dozen steps after the rate has arrived.
    void learn(double& rate, double* deviation, std::size_t bytes, std::chrono::nanoseconds took) const noexcept {
        const double observed = observed_rate(bytes, took);
        if (observed < 0.0) return;
        const double ceiling = std::max(rate, min_rate) * max_jump;
        const double clamped = std::clamp(observed, rate / max_jump, ceiling);
        if (deviation != nullptr && clamped == observed) *deviation += learn_weight * (std::abs(observed - rate) - *deviation);
        rate += learn_weight * (clamped - rate);
    }
};

}  // namespace deferred_unmap

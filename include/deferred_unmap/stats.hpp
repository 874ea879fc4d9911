// deferred_unmap/stats.hpp - what a reclaim_queue reports: per drain, per error, and in total.
//
// Guarantees: plain values, copyable, no allocation. duration_histogram buckets durations with four
// buckets per power of two (at most 19% wide), from 1 us up, so p50/p99 of drain and step times can
// be quoted in a bug report without keeping every sample.
//
//   auto report = queue.drain(1ms);
//   if (report.pending_items) schedule_next_frame();
//   const auto s = queue.stats();
//   log("drain p99 %lld us, %llu pools", s.drain_durations.quantile(0.99).count() / 1000,
//       static_cast<unsigned long long>(s.items_reclaimed));
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace deferred_unmap {

/// Log-linear histogram of durations. record() is O(1), never allocates, never throws.
class duration_histogram {
public:
    static constexpr std::size_t sub_buckets = 4;
    static constexpr std::size_t octaves = 26;  // 1 us .. ~67 s; longer lands in the last bucket
    static constexpr std::size_t bucket_count = 1 + octaves * sub_buckets;

    void record(std::chrono::nanoseconds d) noexcept {
        const std::int64_t ns = std::max<std::int64_t>(d.count(), 0);
        ++counts_[bucket_of(ns)];
        ++count_;
        total_ += std::chrono::nanoseconds{ns};
        max_ = std::max(max_, std::chrono::nanoseconds{ns});
    }

    [[nodiscard]] std::uint64_t count() const noexcept { return count_; }
    [[nodiscard]] std::chrono::nanoseconds total() const noexcept { return total_; }
    [[nodiscard]] std::chrono::nanoseconds max() const noexcept { return max_; }
    [[nodiscard]] std::uint64_t bucket(std::size_t i) const noexcept { return counts_[i]; }

    /// Exclusive upper bound of bucket `i`. Bucket 0 holds everything under 1 us.
    [[nodiscard]] static constexpr std::chrono::nanoseconds bucket_limit(std::size_t i) noexcept {
        if (i == 0) return std::chrono::nanoseconds{1024};
        const std::size_t octave = (i - 1) / sub_buckets;
        const std::size_t sub = (i - 1) % sub_buckets;
        const std::int64_t base = std::int64_t{1024} << octave;
        return std::chrono::nanoseconds{base + base / static_cast<std::int64_t>(sub_buckets) *
                                                   static_cast<std::int64_t>(sub + 1)};
    }

    /// The upper bound of the bucket holding quantile `q` (0..1), capped at the largest sample;
    /// zero when empty. Overestimates by at most one bucket width.
    [[nodiscard]] std::chrono::nanoseconds quantile(double q) const noexcept {
        if (count_ == 0) return std::chrono::nanoseconds{0};
        const double clamped = std::clamp(q, 0.0, 1.0);
        auto rank = static_cast<std::uint64_t>(clamped * static_cast<double>(count_));
        rank = std::clamp<std::uint64_t>(rank, 1, count_);
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < bucket_count; ++i) {
            seen += counts_[i];
            if (seen >= rank) return std::min(bucket_limit(i), max_);
        }
        return max_;
    }

    void merge(const duration_histogram& other) noexcept {
        for (std::size_t i = 0; i < bucket_count; ++i) counts_[i] += other.counts_[i];
        count_ += other.count_;
        total_ += other.total_;
        max_ = std::max(max_, other.max_);
    }

private:
    static std::size_t bucket_of(std::int64_t ns) noexcept {
        if (ns < 1024) return 0;
        const auto value = static_cast<std::uint64_t>(ns);
        const auto octave = static_cast<std::size_t>(std::bit_width(value)) - 1 - 10;  // 2^10 ns: first octave
        if (octave >= octaves) return bucket_count - 1;
        const std::uint64_t base = std::uint64_t{1} << (octave + 10);
        const std::uint64_t sub = (value - base) * sub_buckets / base;
        return 1 + octave * sub_buckets + static_cast<std::size_t>(sub);
    }

    std::array<std::uint64_t, bucket_count> counts_{};
    std::uint64_t count_ = 0;
    std::chrono::nanoseconds total_{0};
    std::chrono::nanoseconds max_{0};
};

/// What one drain() call did.
struct drain_report {
    std::size_t steps = 0;            ///< munmap and close calls made by this drain on the calling thread
    std::size_t bytes_unmapped = 0;   ///< page-rounded bytes this drain unmapped
    std::size_t fds_closed = 0;       ///< descriptors this drain closed itself
    std::size_t fds_handed_off = 0;   ///< descriptors passed to the worker to close (close_on_worker)
    std::size_t errors = 0;           ///< failed munmap/close calls (see reclaim_error)
    bool busy = false;                ///< another thread held the steps (a push over the cap, a flush,
                                      ///< the unmapping worker) for the whole budget: nothing was done
    std::chrono::nanoseconds elapsed{0};  ///< the whole call, waiting for a busy queue included
    std::size_t pending_bytes = 0;    ///< mapped bytes still waiting, when drain returned
    std::size_t pending_items = 0;    ///< items not yet fully reclaimed, when drain returned
};

/// One failed system call during reclamation. The item it belongs to is still accounted for.
struct reclaim_error {
    enum class operation { unmap, close };
    operation op = operation::unmap;
    int error = 0;               ///< the errno value
    void* addr = nullptr;        ///< the range passed to munmap (unmap only)
    std::size_t length = 0;
    int fd = -1;                 ///< the descriptor passed to close (close only)
    bool recovered = false;      ///< a failed chunk whose fallback (unmapping the whole rest) then succeeded
};

/// One burst: from a push into an empty queue until every item of it (and of any pushed meanwhile)
/// was torn down, its descriptor closed included. What a host logs to answer "how much, how long".
struct burst_report {
    std::uint64_t items = 0;               ///< items pushed during the burst
    std::uint64_t bytes = 0;               ///< page-rounded mapped bytes pushed during the burst
    std::uint64_t drains = 0;              ///< drain calls that ran a step or handed work on
    std::chrono::nanoseconds duration{0};  ///< first push until the queue was empty: memory all back
    std::chrono::nanoseconds worst_drain{0};  ///< the longest of those drains, waiting included
};

/// Totals since the queue was made. A snapshot: stats() copies it.
struct reclaim_stats {
    std::uint64_t items_pushed = 0;
    std::uint64_t bytes_pushed = 0;      ///< page-rounded mapped bytes pushed
    std::uint64_t items_reclaimed = 0;   ///< items fully torn down (including those with errors)
    std::uint64_t bytes_unmapped = 0;
    std::uint64_t fds_closed = 0;        ///< close() calls made, successful or not
    std::uint64_t drains = 0;            ///< drain() calls that ran at least one step
    std::uint64_t steps = 0;             ///< steps run by drain, flush and cap enforcement
    std::uint64_t worker_steps = 0;      ///< steps run by the worker thread
    std::uint64_t unmap_errors = 0;      ///< failed munmap calls, including ones a fallback recovered
    std::uint64_t close_errors = 0;      ///< close calls that reported an error (the fd is gone anyway)
    std::uint64_t fallback_unmaps = 0;   ///< failed chunks retried as one munmap of the whole rest
    std::uint64_t bytes_leaked = 0;      ///< bytes left mapped because even the fallback failed
    std::uint64_t synchronous_pushes = 0;  ///< pushes torn down at once because the queue could not grow
    std::uint64_t cap_steps = 0;         ///< steps forced by max_pending_bytes or max_pending_items in push
    std::uint64_t busy_drains = 0;       ///< drains that found the steps held elsewhere for their budget
    std::uint64_t bursts = 0;            ///< bursts completed (the queue went from empty to empty)
    burst_report last_burst;             ///< the latest completed burst
    std::size_t peak_pending_bytes = 0;  ///< the largest burst of mapped bytes waiting at once
    std::size_t peak_pending_items = 0;  ///< the largest number of pools waiting at once
    duration_histogram drain_durations;  ///< drain() calls that ran at least one step
    duration_histogram step_durations;   ///< each munmap/close made on the draining thread
    duration_histogram worker_step_durations;  ///< each munmap/close made on the worker
    /// Each munmap step's |time - the model's prediction for it|, time being what the model learns
    /// from (thread CPU time where the Os has it, else wall): how well steps are sized.
    duration_histogram unmap_prediction_error;
    std::uint64_t unmap_steps_over_max_step = 0;  ///< munmap steps whose time (as above) exceeded max_step
    /// The errno that kept the worker from starting (EAGAIN: no thread; EMFILE, ENFILE: no pipe), 0
    /// when it started or none was asked for. Nonzero: the queue tears everything down inline.
    int worker_error = 0;
};

}  // namespace deferred_unmap

// Drives a scripted reclaim queue with a stream of operations and checks it after every operation
// against a reference model. Shared by the randomized model test (choices from a seeded generator),
// the libFuzzer target and its corpus replay driver (choices from fuzzer bytes).
//
// The reference does not trust the queue's log: it knows the items pushed, oldest first, and for each
// call scripted_os records it asks "is this the one call the queue may make now?" (the next chunk of
// the oldest unfinished item at the right address and length, or the fallback munmap of the whole rest
// after a failed chunk, or the oldest item's close once its mapping is gone; a close that did not fit an
// inline drain waits aside, goes first in the next run, and no newer close goes before it). It replays drain's budget
// decisions with its own copy of the cost model, so a step started that was predicted not to fit, or a
// step skipped that would have fit, is a divergence. After each operation it compares pending bytes and
// items, the model, stats() and next_deadline(), and the script's open descriptors, mapped bytes and
// misuse counter (a double close or double unmap).
//
// drain_pause: most queues have none; the others sleep 1 ns, up to 300 us, 1 s (longer than any finite
// budget drawn) or nanoseconds::max() (never fits), with a scripted overshoot that may change before
// each drain. The pauses (logged through os_script::on_pause) are matched like the calls: each must be
// the one the reference expects, between two munmap steps of the draining thread within one drain or
// drain_until, never first, last, next to a close, in a flush, a push over the cap, the destructor or
// with unmap_on_worker, asking exactly drain_pause. The reference budgets each pause at its own learned
// expectation, as drain does, and replays the check made after the sleep.
//
// Apart from the reference, an order witness sees every call as it is made, on any thread, and knows
// only which item each range and descriptor belongs to: munmaps must come in push order, closes in
// push order, and no munmap of an item after the close of it or of anything pushed later. It shares
// no rule with drain's loop, so a mistake the reference and the queue made alike still shows.
//
// Worker modes: calls made off the main thread cost nothing on the manual clock, so drain's timing
// stays exact; what the worker does concurrently is checked for order and counted, and compared
// exactly once the queue is flushed or destroyed.
#pragma once

#include <deferred_unmap/deferred_unmap.hpp>
#include <deferred_unmap/testing.hpp>

#include "../modes.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace du_reliability {

using du_modes::inline_mode;
using du_modes::two_mib_steps;

namespace du = deferred_unmap;
namespace dt = deferred_unmap::testing;
using scripted_queue = du::basic_reclaim_queue<dt::manual_clock, dt::scripted_os>;
using call_kind = dt::os_call::kind;
using ns = std::chrono::nanoseconds;

/// Every errno munmap(2) and close(2) document, by call.
inline constexpr std::array<int, 3> unmap_errnos{EINVAL, ENOMEM, EPERM};
inline constexpr std::array<int, 5> close_errnos{EBADF, EINTR, EIO, ENOSPC, EDQUOT};

/// Choices from a seed (splitmix64): the same seed gives the same run. The drain_pause and
/// first_step_ns_per_byte options come from a second stream (option_below), so a seed's operations
/// are those it chose before the harness drew them.
class prng_source {
public:
    explicit prng_source(std::uint64_t seed) noexcept : state_(seed), option_state_(seed ^ 0xD1B54A32D192ED03ULL) {}
    std::uint64_t next() noexcept { return mix(state_); }
    std::uint64_t below(std::uint64_t n) noexcept { return n == 0 ? 0 : next() % n; }
    std::uint64_t option_below(std::uint64_t n) noexcept { return n == 0 ? 0 : mix(option_state_) % n; }
    [[nodiscard]] bool exhausted() const noexcept { return false; }

private:
    static std::uint64_t mix(std::uint64_t& state) noexcept {
        std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31U);
    }

    std::uint64_t state_;
    std::uint64_t option_state_;
};

/// Choices read from fuzzer bytes, one byte per small choice and four per large one; zeros after the end.
/// The drain_pause and first_step_ns_per_byte options (option_below) are read from the last byte
/// backwards, zeros once all are read: they shift nothing the operations read, so an input from
/// before they existed decodes to the same operations (with a pause where its last bytes choose one).
class bytes_source {
public:
    bytes_source(const std::uint8_t* data, std::size_t size) noexcept : data_(data), size_(size), tail_(size) {}
    std::uint64_t below(std::uint64_t n) noexcept {
        if (n <= 1) return 0;
        const int width = n <= 256 ? 1 : 4;
        std::uint64_t value = 0;
        for (int i = 0; i < width; ++i) value = (value << 8U) | (pos_ < size_ ? data_[pos_++] : 0U);
        return value % n;
    }
    std::uint64_t option_below(std::uint64_t n) noexcept {
        if (n <= 1) return 0;
        const int width = n <= 256 ? 1 : 4;
        std::uint64_t value = 0;
        for (int i = 0; i < width; ++i) value = (value << 8U) | (tail_ > 0 ? data_[--tail_] : 0U);
        return value % n;
    }
    [[nodiscard]] bool exhausted() const noexcept { return pos_ >= size_; }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t pos_ = 0;
    std::size_t tail_;
};

/// What a run did, for the README's figures.
struct run_counts {
    std::uint64_t operations = 0;
    std::uint64_t queues = 0;
    std::uint64_t calls_checked = 0;  ///< munmap/close calls matched against the reference
    std::uint64_t items = 0;
    std::uint64_t unmap_faults = 0;
    std::uint64_t close_faults = 0;
    std::uint64_t errors_reported = 0;  ///< on_error calls
    std::uint64_t paused_queues = 0;    ///< queues made with a drain_pause
    std::uint64_t pauses_checked = 0;   ///< pauses matched against the reference
    std::uint64_t drains_until = 0;     ///< drain_until calls (only with a drain_pause)
    std::uint64_t pauses_cut = 0;       ///< pauses after which the next step no longer fit
    std::uint64_t closes_set_aside = 0; ///< closes that did not fit an inline drain and waited for the next
    std::uint64_t calls_witnessed = 0;  ///< munmap/close calls the order witness checked
};

/// The order contract, checked from the calls alone: munmaps in push order, closes in push order, no
/// munmap of an item once it or a newer one was closed. Knows nothing of budgets, steps or workers.
class order_witness {
public:
    /// Forgets every item: a fresh queue on a fresh script. O(items).
    void reset() {
        ranges_.clear();
        open_.clear();
        items_ = 0;
        last_unmapped_.reset();
        last_closed_.reset();
        violation_.clear();
    }

    /// Item number items_ holds [addr, addr + length) and `fd` (nullptr, -1: none). Call before its push.
    void pushed(const std::byte* addr, std::size_t length, int fd) {
        const std::size_t item = items_++;
        if (addr != nullptr && length > 0) {
            const auto start = reinterpret_cast<std::uintptr_t>(addr);
            ranges_[start] = {start + length, item};
        }
        if (fd >= 0) open_[fd] = item;
    }

    /// Checks one munmap or close as it is made; the first violation is kept.
    void saw(const dt::os_call& call) {
        if (call.op == call_kind::unmap) unmapped(reinterpret_cast<std::uintptr_t>(call.addr));
        if (call.op == call_kind::close) closed(call.fd);
    }

    [[nodiscard]] const std::string& violation() const noexcept { return violation_; }

private:
    void unmapped(std::uintptr_t at) {
        auto it = ranges_.upper_bound(at);
        if (it == ranges_.begin() || at >= (--it)->second.first) return flag("a munmap of a range no item holds");
        const std::size_t item = it->second.second;
        if (last_unmapped_ && item < *last_unmapped_) return flag("a munmap of item " + std::to_string(item) + " after one of item " + std::to_string(*last_unmapped_));
        if (last_closed_ && item <= *last_closed_) return flag("a munmap of item " + std::to_string(item) + " after the close of item " + std::to_string(*last_closed_));
        last_unmapped_ = item;
    }

    void closed(int fd) {
        const auto it = open_.find(fd);
        if (it == open_.end()) return flag("a close of descriptor " + std::to_string(fd) + ", which no waiting item holds");
        const std::size_t item = it->second;
        open_.erase(it);
        if (last_closed_ && item < *last_closed_) return flag("the close of item " + std::to_string(item) + " after that of item " + std::to_string(*last_closed_));
        last_closed_ = item;
    }

    void flag(const std::string& what) {
        if (violation_.empty()) violation_ = "order witness: " + what;
    }

    std::map<std::uintptr_t, std::pair<std::uintptr_t, std::size_t>> ranges_;  // start -> (end, item)
    std::unordered_map<int, std::size_t> open_;  // descriptor -> item
    std::size_t items_ = 0;
    std::optional<std::size_t> last_unmapped_, last_closed_;
    std::string violation_;
};

/// The chunk size the queue uses for a requested unmap_chunk_bytes: whole pages, at least one, and
/// "as large as possible" for requests past the last page multiple.
inline std::size_t expected_chunk(std::size_t requested) noexcept {
    const std::size_t page = du::detail::page_size();
    if (requested > std::numeric_limits<std::size_t>::max() - page) return std::numeric_limits<std::size_t>::max() / page * page;
    return std::max((requested + page - 1) / page * page, page);
}

template <class Source>
class harness {
public:
    harness(Source& source, std::uint64_t script_seed) : source_(source), script_rng_(script_seed) {
        main_thread_ = std::this_thread::get_id();
    }
    ~harness() { queue_.reset(); }
    harness(const harness&) = delete;
    harness& operator=(const harness&) = delete;

    /// Runs one operation and checks the queue against the model. False on the first divergence.
    bool step() {
        if (!failure_.empty()) return false;
        ++counts_.operations;
        if (!queue_) return new_queue();
        switch (source_.below(16)) {
        case 0: case 1: case 2: return push_region();
        case 3: return push_mapping();
        case 4: return push_fd();
        case 5: return push_empty();
        case 6: case 7: case 8: case 9: return drain();
        case 10: return flush();
        case 11: case 12: return advance_clock();
        case 13: return set_faults();
        case 14: return source_.below(8) == 0 ? new_queue() : drain();
        default: return push_region();
        }
    }

    /// Destroys the queue (its destructor flushes) and checks everything came back.
    bool finish() {
        if (!failure_.empty()) return false;
        return !queue_ || end_queue();
    }

    [[nodiscard]] const std::string& failure() const noexcept { return failure_; }
    /// A snapshot: the worker may be counting faults while the queue lives.
    [[nodiscard]] run_counts counts() {
        std::lock_guard lock(log_mutex_);
        return counts_;
    }

private:
    struct ref_item {
        std::byte* addr;
        std::size_t length;
        std::size_t unmapped;
        int fd;
        std::size_t close_bytes;
        double rate = -1.0;  // what this item's own last munmap cost per byte; -1 before one
    };
    struct logged {
        dt::os_call call;
        ns cost;
    };
    enum class site { drain, flush, cap };

    // ---- operations ----

    bool new_queue() {
        if (queue_ && !end_queue()) return false;
        auto& os = dt::reset();
        {
            std::lock_guard lock(log_mutex_);
            log_.clear();
            carried_.clear();
            pause_overshoot_ = ns{0};
            witness_.reset();
        }
        ++counts_.queues;
        du::reclaim_options o;
        const std::size_t page = du::detail::page_size();
        switch (source_.below(6)) {
        case 0: o.unmap_chunk_bytes = page; break;
        case 1: o.unmap_chunk_bytes = 0; break;
        case 2: o.unmap_chunk_bytes = 3 * page + 1; break;
        case 3: o.unmap_chunk_bytes = std::numeric_limits<std::size_t>::max(); break;
        case 4: o.unmap_chunk_bytes = std::size_t{2} << 20U; break;
        default: o.unmap_chunk_bytes = (1 + source_.below(64)) * page; break;
        }
        switch (source_.below(4)) {
        case 0: o.max_step = ns{1}; break;  // steps as short as the model allows: one page unless it predicts nothing
        case 1: o.max_step = ns{1 + static_cast<std::int64_t>(source_.below(1'000'000))}; break;
        case 2: o.max_step = std::chrono::hours{1}; break;  // the chunk alone decides
        default: break;  // the default
        }
        if (source_.below(3) == 0) o.max_pending_bytes = (source_.below(64)) * page;
        switch (source_.below(4)) {
        case 0: o.max_delay = ns::max(); break;
        case 1: o.max_delay = source_.below(2) == 0 ? ns{0} : -ns{1 + static_cast<std::int64_t>(source_.below(1'000'000))}; break;
        default: o.max_delay = ns{static_cast<std::int64_t>(source_.below(200'000'000))}; break;
        }
        const auto mode = source_.below(8);
        o.close_on_worker = mode == 1 || mode == 3;
        o.unmap_on_worker = mode == 2 || mode == 3;
        o.worker_pause = ns{0};
        o.prior.unmap_ns_per_byte = static_cast<double>(source_.below(100)) / 400.0;
        o.prior.close_ns_per_byte = static_cast<double>(source_.below(100)) / 200.0;
        o.prior.call_overhead = ns{static_cast<std::int64_t>(source_.below(5000))};
        o.initial_capacity = source_.below(3) == 0 ? 0 : source_.below(100);
        throwing_on_error_ = source_.below(4) == 0;
        o.on_error = [this](const du::reclaim_error& e) {
            {
                std::lock_guard lock(log_mutex_);
                ++errors_reported_;
                if (e.recovered) ++errors_recovered_;
            }
#if DEFERRED_UNMAP_HAS_EXCEPTIONS
            if (throwing_on_error_) throw std::runtime_error("on_error throws; the queue must swallow it");
#endif
        };
        unmap_rate_ = source_.below(64);
        close_rate_ = source_.below(64);
        unmap_ns_per_byte_ = static_cast<double>(source_.below(100)) / 200.0;
        close_ns_per_byte_ = static_cast<double>(source_.below(100)) / 100.0;
        jitter_ns_ = source_.below(20'000);
        os.cost = [this](const dt::os_call& call) { return script_cost(call); };
        os.fail = [this](const dt::os_call& call) { return script_fail(call); };
        // From the option stream, after the rest: drawing it shifts none of the choices above.
        switch (source_.option_below(16)) {
        case 10: case 11: o.drain_pause = ns{1}; break;
        case 12: case 13: o.drain_pause = ns{1 + static_cast<std::int64_t>(source_.option_below(300'000))}; break;
        case 14: o.drain_pause = std::chrono::seconds{1}; break;  // only a drain of a budget of forever sleeps it
        case 15: o.drain_pause = ns::max(); break;  // never fits: see drain()
        default: o.drain_pause = ns{0}; break;
        }
        if (o.drain_pause > ns{0}) {
            ++counts_.paused_queues;
            draw_overshoot();
        }
        os.on_pause = [this](const dt::os_call& call) { script_pause(call); };
        // Also from the option stream: a zero draw (the end of an input from before they existed) is
        // the step rule such inputs ran under, sizing by the mean from a prior without a deviation.
        switch (source_.option_below(4)) {
        case 2: o.max_step_deviations = static_cast<double>(source_.option_below(1000)) / 100.0; break;
        case 3: break;  // the default
        default: o.max_step_deviations = 0.0; break;
        }
        if (source_.option_below(2) != 0)
            o.prior.unmap_deviation_ns_per_byte = static_cast<double>(source_.option_below(100)) / 800.0;
        // Last from the option stream, so the options above decode as before it existed; a zero draw
        // (an older input's end) is the lowest rate, near the rule such inputs ran under.
        o.first_step_ns_per_byte = static_cast<double>(1 + source_.option_below(100)) / 400.0;

        options_ = o;
        chunk_ = expected_chunk(o.unmap_chunk_bytes);
        model_ = o.prior;
        expected_pause_ = o.drain_pause;
        expected_ = {};
        items_.clear();
        handed_.clear();
        last_drain_ = {};
        waiting_since_ = {};
        leaked_ = 0;
        errors_reported_ = errors_recovered_ = 0;
        expected_recovered_ = 0;
        last_worker_advance_ = 0;
        queue_ = std::make_unique<scripted_queue>(std::move(o));
        return check("new queue");
    }

    bool end_queue() {
        queue_.reset();  // flushes, then joins the worker
        auto log = take_log();
        if (!consume_lenient(log, site::flush)) return false;
        if (items_ref() != 0 || !handed_.empty()) return fail("destructor left items unreclaimed");
        if (!witness_checks_out("destructor")) return false;
        auto& os = dt::script();
        if (os.open_fds() != 0) return fail("destructor left descriptors open: " + std::to_string(os.open_fds()));
        if (os.mapped_bytes() != leaked_) return fail("mapped bytes after destructor " + std::to_string(os.mapped_bytes()) + " != leaked " + std::to_string(leaked_));
        if (os.misuse() != 0) return fail("double close or double unmap");
        if (errors_reported_ != expected_.unmap_errors + expected_.close_errors) return fail("on_error calls differ from failed calls");
        counts_.errors_reported += errors_reported_;
        return true;
    }

    std::size_t region_bytes() {
        const std::size_t page = du::detail::page_size();
        const std::size_t unit = std::min<std::size_t>(chunk_, std::size_t{8} << 20U);
        std::size_t bytes = unit * source_.below(5) + page * source_.below(9);
        if (source_.below(2) == 0 && bytes > page) bytes -= source_.below(page);
        return std::max<std::size_t>(bytes, 1);
    }

    bool push_region() {
        const std::size_t bytes = region_bytes();
        auto region = dt::make_region(bytes);
        ref_item it{static_cast<std::byte*>(region.data()), du::detail::round_up_to_page(bytes), 0, region.fd(), 0};
        it.close_bytes = it.length;
        return push_and_check(it, [&] { queue_->push(std::move(region)); });
    }

    bool push_mapping() {
        const std::size_t bytes = region_bytes();
        auto map = dt::scripted_mapping::adopt(dt::script().map_range(bytes), bytes);
        ref_item it{static_cast<std::byte*>(map.data()), du::detail::round_up_to_page(bytes), 0, -1, 0};
        return push_and_check(it, [&] { queue_->push(std::move(map)); });
    }

    bool push_fd() {
        const std::size_t bytes = region_bytes();
        dt::scripted_fd fd{dt::script().open_fd(bytes)};
        const auto pick = source_.below(8);
        const std::size_t hint = pick == 0 ? std::numeric_limits<std::size_t>::max() : pick < 4 ? 0 : bytes;  // max: a bogus hint
        // No hint: the queue asks the Os before it predicts or learns the close, and the script says `bytes`.
        ref_item it{nullptr, 0, 0, fd.get(), hint == 0 ? bytes : hint};
        return push_and_check(it, [&] { queue_->push(std::move(fd), hint); });
    }

    bool push_empty() {
        // Empty handles and a region holding only its descriptor.
        switch (source_.below(4)) {
        case 0: queue_->push(dt::scripted_region{}); return check("push(empty region)");
        case 1: queue_->push(dt::scripted_mapping{}); return check("push(empty mapping)");
        case 2: queue_->push(dt::scripted_fd{}); return check("push(empty fd)");
        default: {
            dt::scripted_region region{dt::scripted_fd{dt::script().open_fd(4096)}, dt::scripted_mapping{}};
            ref_item it{nullptr, 0, 0, region.fd(), 0};
            return push_and_check(it, [&] { queue_->push(std::move(region)); });
        }
        }
    }

    template <class Push>
    bool push_and_check(const ref_item& it, Push&& push) {
        ++counts_.items;
        const std::size_t before = pending_bytes_ref();
        const auto pushed_at = dt::manual_clock::now();  // a push over the cap moves the clock
        if (items_ref() == 0) waiting_since_ = pushed_at;
        {
            std::lock_guard lock(log_mutex_);
            witness_.pushed(it.addr, it.length, it.fd);
        }
        push();
        items_.push_back(it);
        ++expected_.items_pushed;
        expected_.bytes_pushed += it.length;
        if (pending_bytes_ref() > options_.max_pending_bytes && !options_.unmap_on_worker) {
            if (!simulate_cap()) return false;
        }
        if (options_.unmap_on_worker) {
            if (!consume_lenient(take_log(), site::cap)) return false;
        }
        return check("push of " + std::to_string(it.length) + " bytes, fd " + std::to_string(it.fd) +
                     " (pending before " + std::to_string(before) + ")");
    }

    bool drain() {
        ns budget{0};
        switch (source_.below(8)) {
        case 0: budget = ns{0}; break;
        case 1: budget = -ns{1 + static_cast<std::int64_t>(source_.below(1000))}; break;
        case 2: budget = ns::max(); break;
        case 3: budget = ns{1}; break;
        default: budget = ns{static_cast<std::int64_t>(source_.below(3'000'000))}; break;
        }
        // With a drain_pause, from the option stream: a new overshoot now and then, and some drains as
        // drain_until(now + budget), whose first step is not free. A drain of a budget of forever would
        // sleep a pause of nanoseconds::max() (and overflow the manual clock): it gets an hour instead.
        bool until = false;
        if (options_.drain_pause > ns{0}) {
            if (source_.option_below(4) == 0) draw_overshoot();
            until = source_.option_below(4) == 0;
            if (options_.drain_pause == ns::max() && budget == ns::max()) budget = std::chrono::hours{1};
        }
        const auto start = dt::manual_clock::now();
        du::drain_report report;
        if (until) {
            ++counts_.drains_until;
            using tp = dt::manual_clock::time_point;
            const tp deadline = budget > tp::max() - start ? tp::max() : start + budget;
            report = queue_->drain_until(deadline);
        } else {
            report = queue_->drain(budget);
        }
        const std::string what = std::string(until ? "drain_until(now + " : "drain(") + std::to_string(budget.count()) + " ns)";
        if ((budget <= ns{0} && !until) || options_.unmap_on_worker) {
            if (report.steps != 0 || report.fds_closed != 0 || report.bytes_unmapped != 0 || report.fds_handed_off != 0)
                return fail(what + " did work on the calling thread");
            if (options_.unmap_on_worker && (budget > ns{0} || until) && !consume_lenient(take_log(), site::cap)) return false;
            return check("drain without steps");
        }
        if (!until) last_drain_ = start;
        // Replays drain's loop: hand a bare close to the worker, else start the next step only if it fits
        // (the first step of drain() always runs); between two munmap steps, sleep first if the sleep as
        // expected and the step both fit, and after it run the step only if it still fits.
        std::vector<logged> log = take_log();
        if (!pauses_well_placed(log, what)) return false;
        std::size_t pos = 0;
        std::size_t steps = 0, handed = 0, closed = 0, unmapped = 0, errors = 0;
        ns elapsed{0};
        bool last_was_unmap = false;  // this drain's previous step was a munmap (a hand-off in between is no step)
        aside_due_ = aside_.has_value();
        while (aside_due_ || !items_.empty()) {
            if (!aside_due_ && aside_ && !unmapping(items_.front())) break;  // no close overtakes the one aside
            if (options_.close_on_worker && !unmapping(items_.front())) {
                hand_off();
                ++handed;
                if (elapsed >= budget) break;
                continue;
            }
            const ref_item& next = aside_due_ ? *aside_ : items_.front();
            const bool free_step = !until && steps == 0;
            const bool sleep_first = options_.drain_pause > ns{0} && last_was_unmap && unmapping(next);
            const ns step = predict(next);
            if (!free_step && !fits(elapsed, sleep_first ? expected_pause_ : ns{0}, step, budget)) {
                if (!aside_ && !unmapping(next)) {  // with close_on_worker, closes never get here
                    aside_ = items_.front();  // waits for the next run; this one goes on to the next item
                    items_.pop_front();
                    ++counts_.closes_set_aside;
                    continue;
                }
                if (aside_due_) {  // drain_until: the waiting close fits no better now; the munmaps go on
                    aside_due_ = false;
                    continue;
                }
                if (sleep_first && fits(elapsed, ns{0}, step, budget)) doubt_pause_ref();
                break;
            }
            if (sleep_first) {
                if (!expect_pause(log, pos, what)) return false;
                const ns took = options_.drain_pause + pause_overshoot_;
                elapsed += took;
                learn_pause_ref(took);
                if (!fits(elapsed, ns{0}, step, budget)) {
                    ++counts_.pauses_cut;  // the drain's last record is this pause
                    break;
                }
            }
            last_was_unmap = unmapping(next);
            step_result r;
            if (!run_step(log, pos, site::drain, r)) return false;
            ++steps;
            elapsed += r.took;
            closed += r.closed;
            unmapped += r.unmapped;
            errors += r.errors;
        }
        if (steps > 0) ++expected_.drains;
        if (until && (steps > 0 || handed > 0)) last_drain_ = start;
        if (!leftovers_are_worker_closes(log, pos)) return false;
        if (report.steps != steps) return fail(what + ": steps " + std::to_string(report.steps) + " != " + std::to_string(steps));
        if (report.fds_handed_off != handed) return fail(what + ": hand-offs differ");
        if (report.fds_closed != closed) return fail(what + ": fds_closed differ");
        if (report.bytes_unmapped != unmapped) return fail(what + ": bytes_unmapped differ");
        if (report.errors != errors) return fail(what + ": errors differ");
        if (report.elapsed != elapsed) return fail(what + ": elapsed " + std::to_string(report.elapsed.count()) + " != " + std::to_string(elapsed.count()));
        if (report.pending_bytes != pending_bytes_ref()) return fail(what + ": reported pending bytes differ");
        return check(what);
    }

    // elapsed + pause + step <= budget, in saturating arithmetic (all four are >= 0 but the budget,
    // and a budget of nanoseconds::max() means forever).
    [[nodiscard]] static bool fits(ns elapsed, ns pause, ns step, ns budget) noexcept {
        constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
        std::int64_t total = elapsed.count();
        for (const ns part : {pause, step}) total = part.count() > top - total ? top : total + part.count();
        return total <= budget.count();
    }

    // The reference's learned pause length, the rule restated in int64 (it checks the queue follows the
    // rule, not that the rule is right; tests/queue_pause.test.cpp checks what the rule does): what a
    // sleep took counts for at most twice the current expectation; the expectation moves a quarter of
    // the way to it, rounding toward the old value, and never drops below what is asked.
    void learn_pause_ref(ns took) noexcept {
        constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
        const std::int64_t old = expected_pause_.count();
        const std::int64_t ceiling = old > top / 2 ? top : old * 2;
        const std::int64_t counted = std::min(took.count(), ceiling);
        const std::int64_t moved = old + (counted - old) / 4;  // C++ division truncates toward zero
        expected_pause_ = ns{std::max(moved, options_.drain_pause.count())};
    }

    // A drain the expected sleep alone kept from a step: an eighth of the way back to what is asked.
    void doubt_pause_ref() noexcept {
        const std::int64_t old = expected_pause_.count();
        expected_pause_ = ns{old - (old - options_.drain_pause.count()) / 8};
    }

    // The next record of the draining thread must be a pause asking drain_pause.
    bool expect_pause(const std::vector<logged>& log, std::size_t& pos, const std::string& what) {
        const logged* l = next_from(log, pos, main_thread_);
        if (!failure_.empty()) return false;
        if (l == nullptr || l->call.op != call_kind::pause)
            return fail(what + ": expected a pause of " + std::to_string(options_.drain_pause.count()) + " ns before the next munmap, got " +
                        (l == nullptr ? std::string("nothing") : describe(l->call)));
        if (l->call.slept != options_.drain_pause) return fail(what + ": a pause asked " + describe(l->call) + ", not drain_pause");
        ++counts_.pauses_checked;
        return true;
    }

    // Where pauses may be in one drain's log, independent of the replay: only on the draining thread,
    // only with a drain_pause and without unmap_on_worker, each asking drain_pause, preceded (on that
    // thread) by a munmap of this drain and followed by another, or by nothing: a drain that finds after
    // the sleep that its next step no longer fits stops there (the replay then requires exactly that).
    bool pauses_well_placed(const std::vector<logged>& log, const std::string& what) {
        const logged* previous = nullptr;
        bool pause_open = false;
        for (const logged& l : log) {
            if (l.call.op == call_kind::pause) {
                if (l.call.thread != main_thread_) return fail(what + ": a pause off the draining thread" + mode());
                if (options_.drain_pause <= ns{0} || options_.unmap_on_worker) return fail(what + ": a pause without a drain_pause to take" + mode());
                if (l.call.slept != options_.drain_pause) return fail(what + ": a pause asked " + describe(l.call) + ", not drain_pause");
                if (previous == nullptr) return fail(what + ": a pause before the drain's first step");
                if (previous->call.op != call_kind::unmap) return fail(what + ": a pause after " + describe(previous->call) + mode());
                pause_open = true;
            } else if (l.call.thread == main_thread_ && pause_open) {
                if (l.call.op != call_kind::unmap) return fail(what + ": a pause before " + describe(l.call) + mode());
                pause_open = false;
            }
            if (l.call.thread == main_thread_) previous = &l;
        }
        return true;
    }

    // A scripted overshoot for the pauses: none, a little, up to 300 us, or up to 5 ms (past most budgets).
    void draw_overshoot() {
        ns overshoot{0};
        switch (source_.option_below(4)) {
        case 0: break;
        case 1: overshoot = ns{1 + static_cast<std::int64_t>(source_.option_below(1000))}; break;
        case 2: overshoot = ns{static_cast<std::int64_t>(source_.option_below(300'000))}; break;
        default: overshoot = ns{1 + static_cast<std::int64_t>(source_.option_below(5'000'000))}; break;
        }
        std::lock_guard lock(log_mutex_);
        pause_overshoot_ = overshoot;
        dt::script().pause_overshoot = overshoot;  // read by the pauses, made by the draining thread only
    }

    bool flush() {
        queue_->flush();
        if (!consume_lenient(take_log(), site::flush)) return false;
        if (items_ref() != 0 || !handed_.empty()) return fail("flush left items");
        if (queue_->pending_items() != 0 || queue_->pending_bytes() != 0) return fail("flush: queue not empty");
        return check("flush") && check_stats_exact("flush");
    }

    bool advance_clock() {
        dt::manual_clock::advance(ns{static_cast<std::int64_t>(source_.below(300'000'000))});
        return check("clock advance");
    }

    bool set_faults() {
        std::lock_guard lock(log_mutex_);
        unmap_rate_ = source_.below(3) == 0 ? 0 : source_.below(256);
        close_rate_ = source_.below(3) == 0 ? 0 : source_.below(256);
        return true;
    }

    // ---- the scripted OS's behaviour (runs on any thread, under the script's lock) ----

    ns script_cost(const dt::os_call& call) {
        std::lock_guard lock(log_mutex_);
        ns cost{0};
        if (call.thread == main_thread_ && call.op != call_kind::map) {
            const double rate = call.op == call_kind::unmap ? unmap_ns_per_byte_ : close_ns_per_byte_;
            cost = ns{static_cast<std::int64_t>(rate * static_cast<double>(call.length))} +
                   ns{static_cast<std::int64_t>(script_rng_.below(jitter_ns_ + 1))};
        }
        if (call.op != call_kind::map) log_.push_back({call, cost});
        if (call.op == call_kind::unmap || call.op == call_kind::close) {
            witness_.saw(call);
            ++counts_.calls_witnessed;
        }
        return cost;
    }

    void script_pause(const dt::os_call& call) {
        std::lock_guard lock(log_mutex_);
        log_.push_back({call, call.slept + pause_overshoot_});
    }

    int script_fail(const dt::os_call& call) {
        std::lock_guard lock(log_mutex_);
        if (call.op == call_kind::unmap && script_rng_.below(256) < unmap_rate_) {
            ++counts_.unmap_faults;
            return unmap_errnos[script_rng_.below(unmap_errnos.size())];
        }
        if (call.op == call_kind::close && script_rng_.below(256) < close_rate_) {
            ++counts_.close_faults;
            return close_errnos[script_rng_.below(close_errnos.size())];
        }
        return 0;
    }

    // What the queue did since the last look, after any calls held back from then.
    std::vector<logged> take_log() {
        std::lock_guard lock(log_mutex_);
        for (const logged& l : log_) counts_.calls_checked += l.call.op == call_kind::pause ? 0 : 1;
        std::vector<logged> out;
        out.swap(carried_);
        out.insert(out.end(), log_.begin(), log_.end());
        log_.clear();
        return out;
    }

    // A failed chunk whose fallback call (made right after, by the same thread) is not logged yet.
    [[nodiscard]] bool fallback_pending(const std::vector<logged>& log, std::size_t at) const {
        const logged& l = log[at];
        if (l.call.op != call_kind::unmap || l.call.result == 0) return false;
        // The item it belongs to: the oldest, past any whose close went to the worker.
        auto item = items_.begin();
        while (item != items_.end() && hands_off() && !unmapping(*item)) ++item;
        if (item == items_.end() || !unmapping(*item)) return false;
        const ref_item& it = *item;
        if (it.length - it.unmapped <= expected_length(it, l.call.length)) return false;
        for (std::size_t i = at + 1; i < log.size(); ++i)
            if (log[i].call.thread == l.call.thread) return false;
        return true;
    }

    // ---- the reference ----

    [[nodiscard]] static bool unmapping(const ref_item& it) noexcept { return it.unmapped < it.length; }
    // Closes are handed to the worker one by one (close_on_worker, unless the worker makes every call).
    [[nodiscard]] bool hands_off() const noexcept { return options_.close_on_worker && !options_.unmap_on_worker; }
    // The reference rule for a step's length, written out apart from the queue's. What may fit: an
    // item's first step, at the cautious rate (first_step_ns_per_byte or the model's rate
    // max_step_deviations learned deviations high, whichever is slower); its later steps, at its own last step's rate as
    // many deviations high, but at most twice the first. The chunk capped by what is left when that
    // fits; otherwise an even share, in whole pages, of what is left among the fewest steps no longer
    // than the whole pages that fit (at least one page).
    [[nodiscard]] std::size_t next_chunk(const ref_item& it) const noexcept {
        const std::size_t page = du::detail::page_size();
        const std::size_t left = it.length - it.unmapped;
        const std::size_t cap = std::min(chunk_, left);
        const double k = options_.max_step_deviations;
        const std::size_t first = fit_at(cautious(), cap);
        const std::size_t fit = it.rate < 0.0 ? first
                                              : std::min(fit_at(it.rate + k * model_.unmap_deviation_ns_per_byte, cap),
                                                         first >= cap ? cap : 2 * first);
        if (fit >= cap) return cap;
        const std::size_t steps = left / fit + (left % fit != 0 ? 1 : 0);
        const std::size_t share = left / steps + (left % steps != 0 ? 1 : 0);
        return std::min((share + page - 1) / page * page, left);
    }
    // The munmap length the queue may use now, given it used `seen`. With unmap_on_worker the model
    // also learns from the worker's steps, which the manual clock does not time, so the reference
    // cannot follow it: any whole-page length between one page and the cap is then allowed (and
    // `seen` returned); otherwise exactly next_chunk().
    [[nodiscard]] std::size_t expected_length(const ref_item& it, std::size_t seen) const noexcept {
        if (!options_.unmap_on_worker) return next_chunk(it);
        const std::size_t page = du::detail::page_size();
        const std::size_t cap = std::min(chunk_, it.length - it.unmapped);
        const bool allowed = seen == cap || (seen % page == 0 && seen >= page && seen <= cap);
        return allowed ? seen : next_chunk(it);
    }
    // Whole pages predicted to fit max_step at `rate`, at least one; `cap` for anything at least as long.
    [[nodiscard]] std::size_t fit_at(double rate, std::size_t cap) const noexcept {
        const std::size_t page = du::detail::page_size();
        const auto room = options_.max_step - model_.call_overhead;
        if (room > ns{0} && rate <= 0.0) return cap;
        const double fits = room > ns{0} ? static_cast<double>(room.count()) / rate : 0.0;
        if (fits >= static_cast<double>(cap)) return cap;
        return std::min(std::max(static_cast<std::size_t>(fits) / page, std::size_t{1}) * page, cap);
    }
    // A munmap at the item's own rate once it has one, else at the cautious rate its first step is
    // sized at.
    [[nodiscard]] ns predict(const ref_item& it) const noexcept {
        if (!unmapping(it)) return model_.predict_close(it.close_bytes);
        du::cost_model at = model_;
        at.unmap_ns_per_byte = it.rate >= 0.0 ? it.rate : cautious();
        return at.predict_unmap(next_chunk(it));
    }
    [[nodiscard]] double cautious() const noexcept {
        return std::max(options_.first_step_ns_per_byte, model_.unmap_ns_per_byte_high(options_.max_step_deviations));
    }
    [[nodiscard]] std::size_t pending_bytes_ref() const noexcept {
        std::size_t total = 0;
        for (const auto& it : items_) total += it.length - it.unmapped;
        return total;
    }
    [[nodiscard]] std::size_t items_ref() const noexcept { return items_.size() + (aside_ ? 1 : 0); }
    [[nodiscard]] std::size_t open_fds_ref() const noexcept {
        std::size_t total = handed_.size() + (aside_ ? 1 : 0);
        for (const auto& it : items_) total += it.fd >= 0 ? 1 : 0;
        return total;
    }

    void hand_off() {
        handed_.push_back(items_.front().fd);
        items_.pop_front();
    }

    struct step_result {
        ns took{0};
        std::size_t closed = 0;
        std::size_t unmapped = 0;
        std::size_t errors = 0;
    };

    // The next call `thread` made; calls of other threads in between can only be the worker's closes.
    const logged* next_from(const std::vector<logged>& log, std::size_t& pos, std::thread::id thread) {
        while (pos < log.size()) {
            const logged& l = log[pos++];
            if (l.call.thread == thread) return &l;
            if (!worker_close(l)) return nullptr;
        }
        return nullptr;
    }

    bool worker_close(const logged& l) {
        if (l.call.op != call_kind::close || handed_.empty() || handed_.front() != l.call.fd)
            return fail("the worker made an unexpected call: " + describe(l.call) + mode());
        handed_.pop_front();
        ++expected_.fds_closed;
        ++expected_.items_reclaimed;
        ++expected_.worker_steps;
        if (l.call.result != 0) ++expected_.close_errors;
        return true;
    }

    bool leftovers_are_worker_closes(const std::vector<logged>& log, std::size_t pos) {
        while (pos < log.size()) {
            const logged& l = log[pos++];
            if (l.call.op == call_kind::pause) return fail("a pause at the end of the drain that the reference did not take" + mode());
            if (l.call.thread == main_thread_) return fail("the queue made a call the reference did not expect: " + describe(l.call));
            if (!worker_close(l)) return false;
        }
        return true;
    }

    [[nodiscard]] std::string mode() const {
        if (!options_.close_on_worker && !options_.unmap_on_worker) return " [inline]";
        return std::string(" [") + (options_.close_on_worker ? "close_on_worker " : "") + (options_.unmap_on_worker ? "unmap_on_worker" : "") + "]";
    }

    static std::string describe(const dt::os_call& c) {
        char buf[160];
        if (c.op == call_kind::pause) {
            std::snprintf(buf, sizeof buf, "pause of %lld ns", static_cast<long long>(c.slept.count()));
            return buf;
        }
        std::snprintf(buf, sizeof buf, "%s addr=%p len=%zu fd=%d result=%d", c.op == call_kind::unmap ? "munmap" : "close", c.addr, c.length, c.fd, c.result);
        return buf;
    }

    // The item whose step the queue must make next: a close set aside in an earlier run, else the oldest.
    ref_item& next_item() { return aside_due_ ? *aside_ : items_.front(); }

    // One step of the next item, as the queue must make it, checked against the log.
    bool run_step(const std::vector<logged>& log, std::size_t& pos, site where, step_result& r) {
        ref_item& it = next_item();
        const logged* l = next_from(log, pos, main_thread_);
        if (!failure_.empty()) return false;
        if (l == nullptr) return fail("the queue stopped before a step the reference expected (" + std::string(unmapping(it) ? "munmap" : "close") + ")");
        if (l->call.op == call_kind::pause) return fail(std::string("a pause where the reference expected a ") + (unmapping(it) ? "munmap" : "close") + " step right away" + mode());
        if (!apply_step(it, *l, log, pos, r)) return false;
        ++expected_.steps;
        if (where == site::cap) ++expected_.cap_steps;
        return true;
    }

    bool apply_step(ref_item& it, const logged& l, const std::vector<logged>& log, std::size_t& pos, step_result& r) {
        r.took = l.cost;
        if (unmapping(it)) {
            const std::size_t chunk = expected_length(it, l.call.length);
            const std::size_t rest = it.length - it.unmapped;
            std::byte* at = it.addr + it.unmapped;
            if (l.call.op != call_kind::unmap || l.call.addr != at || l.call.length != chunk)
                return fail("expected munmap(" + std::to_string(reinterpret_cast<std::uintptr_t>(at)) + ", " + std::to_string(chunk) + "), got " + describe(l.call));
            if (l.call.result == 0) {
                model_.learn_unmap(chunk, l.cost);
                if (const double rate = model_.observed_rate(chunk, l.cost); rate >= 0.0) it.rate = rate;
                r.unmapped = chunk;
            } else {
                ++r.errors;
                ++expected_.unmap_errors;
                bool recovered = false;
                if (rest > chunk) {
                    ++expected_.fallback_unmaps;
                    const logged* f = next_from(log, pos, l.call.thread);
                    if (f == nullptr || f->call.op != call_kind::unmap || f->call.addr != at || f->call.length != rest)
                        return fail("a failed chunk (" + describe(l.call) + ") was not followed by one munmap of the whole rest" +
                                    (f == nullptr ? std::string(" but by nothing") : " but by " + describe(f->call)) + mode());
                    r.took += f->cost;
                    recovered = f->call.result == 0;
                    if (!recovered) {
                        ++r.errors;
                        ++expected_.unmap_errors;
                    }
                }
                if (recovered) {
                    r.unmapped = rest;
                    ++expected_recovered_;
                } else {
                    leaked_ += rest;
                    expected_.bytes_leaked += rest;
                }
            }
            it.unmapped += l.call.result == 0 ? chunk : rest;
            expected_.bytes_unmapped += r.unmapped;
            if (!unmapping(it) && it.fd < 0) complete(it);
            return true;
        }
        if (l.call.op != call_kind::close || l.call.fd != it.fd) return fail("expected close(" + std::to_string(it.fd) + "), got " + describe(l.call));
        r.closed = 1;
        ++expected_.fds_closed;
        if (l.call.result == 0) model_.learn_close(it.close_bytes, l.cost);
        else {
            ++r.errors;
            ++expected_.close_errors;
        }
        complete(it);
        return true;
    }

    void complete(const ref_item& it) {
        if (aside_due_ && &it == &*aside_) {
            aside_.reset();
            aside_due_ = false;
        } else {
            items_.pop_front();
        }
        ++expected_.items_reclaimed;
    }

    // A push over max_pending_bytes: steps, oldest first, until the pending bytes fit.
    bool simulate_cap() {
        std::vector<logged> log = take_log();
        std::size_t pos = 0;
        aside_due_ = aside_.has_value();
        while (pending_bytes_ref() > options_.max_pending_bytes && !items_.empty()) {
            if (options_.close_on_worker && !unmapping(items_.front())) {
                hand_off();
                continue;
            }
            step_result r;
            if (!run_step(log, pos, site::cap, r)) return false;
        }
        return leftovers_are_worker_closes(log, pos);
    }

    // Calls whose thread and timing the reference cannot foresee (flush, destructor, worker unmaps):
    // each must still be the one call allowed next.
    bool consume_lenient(const std::vector<logged>& log, site where) {
        aside_due_ = aside_.has_value();
        for (std::size_t pos = 0; pos < log.size();) {
            if (where != site::flush && fallback_pending(log, pos)) {
                carried_.assign(log.begin() + static_cast<std::ptrdiff_t>(pos), log.end());  // seen next time
                return true;
            }
            const logged& l = log[pos++];
            if (l.call.op == call_kind::pause)
                return fail(std::string("a pause in ") + (where == site::flush ? "a flush or the destructor" : "a push over the cap or on the worker") + mode());
            if (l.call.op == call_kind::close && !handed_.empty() && handed_.front() == l.call.fd) {
                if (!worker_close(l)) return false;
                continue;
            }
            // An item whose close went to the worker, seen only through a later item's call.
            while (!items_.empty() && hands_off() && !unmapping(items_.front()) &&
                   !(l.call.op == call_kind::close && l.call.fd == items_.front().fd))
                hand_off();
            // A flush hands closes to the worker too; this one was made before the next munmap.
            if (!items_.empty() && hands_off() && !unmapping(items_.front()) && l.call.thread != main_thread_) {
                hand_off();
                if (!worker_close(l)) return false;
                continue;
            }
            if (!aside_due_ && items_.empty()) return fail("a call with nothing pending: " + describe(l.call));
            step_result r;
            const std::size_t before = pending_bytes_ref();
            if (!apply_step(next_item(), l, log, pos, r)) return false;
            // The worker's last step may be logged but not yet subtracted from pending_bytes().
            if (l.call.thread != main_thread_) last_worker_advance_ = before - pending_bytes_ref();
            if (l.call.thread == main_thread_) {
                ++expected_.steps;
                if (where == site::cap) ++expected_.cap_steps;
            } else {
                ++expected_.worker_steps;
            }
        }
        return true;
    }

    // ---- checks after every operation ----

    bool check(const std::string& what) {
        if (!witness_checks_out(what)) return false;
        auto& os = dt::script();
        if (os.misuse() != 0) return fail(what + ": double close or double unmap");
        const bool async = options_.close_on_worker || options_.unmap_on_worker;
        const std::size_t q_bytes = queue_->pending_bytes();
        const std::size_t q_items = queue_->pending_items();
        if (!async) {
            if (q_bytes != pending_bytes_ref()) return fail(what + ": pending_bytes " + std::to_string(q_bytes) + " != model " + std::to_string(pending_bytes_ref()));
            if (q_items != items_ref()) return fail(what + ": pending_items " + std::to_string(q_items) + " != model " + std::to_string(items_ref()));
            if (os.open_fds() != open_fds_ref()) return fail(what + ": open descriptors differ from the model");
            if (os.mapped_bytes() != pending_bytes_ref() + leaked_) return fail(what + ": mapped bytes differ from the model");
            if (!check_stats_exact(what)) return false;
        } else if (!options_.unmap_on_worker) {
            // The worker may be closing handed-off descriptors right now; nothing else moves.
            if (q_bytes != pending_bytes_ref()) return fail(what + ": pending_bytes differ (close_on_worker)");
            if (q_items < items_.size() || q_items > items_.size() + handed_.size() + 1) return fail(what + ": pending_items out of range (close_on_worker)");
        } else {
            if (q_bytes > pending_bytes_ref() + last_worker_advance_) return fail(what + ": more pending bytes than the model allows");
        }
        if (!options_.unmap_on_worker) {
            const cost_snapshot got{queue_->model()};
            if (!(got == cost_snapshot{model_})) return fail(what + ": cost model diverged");
            const auto deadline = queue_->next_deadline();
            if (deadline != expected_deadline())
                return fail(what + ": next_deadline " + std::to_string(deadline.time_since_epoch().count()) + " != model " +
                            std::to_string(expected_deadline().time_since_epoch().count()) + " (max_delay " +
                            std::to_string(options_.max_delay.count()) + " ns)");
        }
        return true;
    }

    struct cost_snapshot {
        explicit cost_snapshot(const du::cost_model& m)
            : unmap(m.unmap_ns_per_byte), close(m.close_ns_per_byte), overhead(m.call_overhead), deviation(m.unmap_deviation_ns_per_byte) {}
        double unmap;
        double close;
        ns overhead;
        double deviation;
        bool operator==(const cost_snapshot&) const = default;
    };

    [[nodiscard]] dt::manual_clock::time_point expected_deadline() const noexcept {
        using tp = dt::manual_clock::time_point;
        if (items_ref() == 0) return tp::max();
        const tp from = std::max(waiting_since_, last_drain_);
        // Saturates: a max_delay of "forever" means no deadline, not an overflow; a negative one is zero.
        const ns delay = std::max(options_.max_delay, ns{0});
        if (delay > tp::max() - from) return tp::max();
        return from + delay;
    }

    bool check_stats_exact(const std::string& what) {
        const du::reclaim_stats s = queue_->stats();
        const auto& e = expected_;
#define DU_STAT(field)                                                                                      \
    if (s.field != e.field)                                                                                 \
        return fail(what + ": stats." #field " " + std::to_string(s.field) + " != model " + std::to_string(e.field));
        DU_STAT(items_pushed)
        DU_STAT(bytes_pushed)
        DU_STAT(items_reclaimed)
        DU_STAT(bytes_unmapped)
        DU_STAT(fds_closed)
        DU_STAT(drains)
        DU_STAT(steps)
        DU_STAT(worker_steps)
        DU_STAT(unmap_errors)
        DU_STAT(close_errors)
        DU_STAT(fallback_unmaps)
        DU_STAT(bytes_leaked)
        DU_STAT(synchronous_pushes)
#undef DU_STAT
        if (!options_.unmap_on_worker && s.cap_steps != e.cap_steps) return fail(what + ": stats.cap_steps differ");
        std::lock_guard lock(log_mutex_);
        if (errors_reported_ != e.unmap_errors + e.close_errors) return fail(what + ": on_error calls differ from failed calls");
        if (errors_recovered_ != expected_recovered_) return fail(what + ": errors marked recovered differ from fallbacks that succeeded");
        return true;
    }

    bool witness_checks_out(const std::string& what) {
        std::lock_guard lock(log_mutex_);
        return witness_.violation().empty() || fail(what + ": " + witness_.violation() + mode());
    }

    bool fail(const std::string& message) {
        if (failure_.empty()) failure_ = message;
        return false;
    }

    Source& source_;
    prng_source script_rng_;  // under log_mutex_: the scripted OS's costs and failures
    std::thread::id main_thread_;
    run_counts counts_;
    std::string failure_;

    std::unique_ptr<scripted_queue> queue_;
    du::reclaim_options options_;
    std::size_t chunk_ = 0;
    du::cost_model model_;
    du::reclaim_stats expected_;
    std::deque<ref_item> items_;
    std::optional<ref_item> aside_;  // an unmapped item whose close did not fit an inline drain
    bool aside_due_ = false;         // aside_ was set before this run: its close is the run's next step
    std::deque<int> handed_;  // descriptors handed to the worker, not yet closed
    dt::manual_clock::time_point last_drain_{};
    dt::manual_clock::time_point waiting_since_{};  // when a push found nothing waiting for a drain
    std::size_t leaked_ = 0;
    std::uint64_t expected_recovered_ = 0;
    std::size_t last_worker_advance_ = 0;
    ns expected_pause_{0};   // the reference's learned length of one drain_pause sleep
    ns pause_overshoot_{0};  // what each pause takes on top of drain_pause (the script's, mirrored)

    std::mutex log_mutex_;
    std::vector<logged> log_;
    std::vector<logged> carried_;  // a worker's step split across two looks at the log
    order_witness witness_;        // every munmap and close, as made
    std::uint64_t unmap_rate_ = 0;  // out of 256
    std::uint64_t close_rate_ = 0;
    double unmap_ns_per_byte_ = 0;
    double close_ns_per_byte_ = 0;
    std::uint64_t jitter_ns_ = 0;
    bool throwing_on_error_ = false;
    std::uint64_t errors_reported_ = 0;
    std::uint64_t errors_recovered_ = 0;
};

}  // namespace du_reliability

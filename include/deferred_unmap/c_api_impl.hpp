// deferred_unmap/c_api_impl.hpp - the definitions behind <deferred_unmap/c_api.h>.
//
// Guarantees: defines every du_* function with C linkage on top of reclaim_queue; no exception crosses
// into C (each becomes NULL + errno from du_queue_create; nothing else can throw); a push that returns
// -EINVAL has taken nothing. Include it from exactly one C++20 source of the host (a second one is a
// duplicate-symbol link error, by design), or link the ready library (CMake deferred_unmap::c).
//
//   // du_c_api.cpp, the host's only use of this header:
//   #include <deferred_unmap/c_api_impl.hpp>
//
//   // compositor.c, any number of C sources:
//   #include <deferred_unmap/c_api.h>
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "c_api.h"
#include "reclaim_queue.hpp"

struct du_queue {
    explicit du_queue(deferred_unmap::reclaim_options options) : queue(std::move(options)) {}
    deferred_unmap::reclaim_queue queue;
};

namespace deferred_unmap::detail::c_api {

inline du_queue_options defaults() noexcept {
    const reclaim_options d;
    du_queue_options opts{};
    opts.size = sizeof opts;
    opts.unmap_chunk_bytes = d.unmap_chunk_bytes;
    opts.max_pending_bytes = d.max_pending_bytes;
    opts.max_delay_ns = d.max_delay.count();
    opts.close_on_worker = d.close_on_worker ? 1 : 0;
    opts.unmap_on_worker = d.unmap_on_worker ? 1 : 0;
    opts.low_priority_closes = d.low_priority_closes ? 1 : 0;
    opts.worker_pause_ns = d.worker_pause.count();
    opts.unmap_ns_per_byte = d.prior.unmap_ns_per_byte;
    opts.close_ns_per_byte = d.prior.close_ns_per_byte;
    opts.call_overhead_ns = d.prior.call_overhead.count();
    opts.initial_capacity = d.initial_capacity;
    opts.max_step_ns = d.max_step.count();
    opts.drain_pause_ns = d.drain_pause.count();
    opts.max_step_deviations = d.max_step_deviations;
    opts.max_pending_items = d.max_pending_items;
    opts.first_step_ns_per_byte = d.first_step_ns_per_byte;
    return opts;
}

// The first options layout, as the growable one with the defaults for everything it lacks.
inline du_queue_options widen(const du_options& opts) noexcept {
    du_queue_options wide = defaults();
    wide.unmap_chunk_bytes = opts.unmap_chunk_bytes;
    wide.max_pending_bytes = opts.max_pending_bytes;
    wide.max_delay_ns = opts.max_delay_ns;
    wide.close_on_worker = opts.close_on_worker;
    wide.unmap_on_worker = opts.unmap_on_worker;
    return wide;
}

// sizeof du_queue_options in each earlier version of c_api.h, oldest first: the only sizes below
// sizeof a caller's init call can have set. Each is the offset of the field appended after it, as
// no appended field has asked for more alignment than the struct had. A size between two cuts a field.
inline constexpr std::size_t earlier_options_sizes[] = {
    offsetof(du_queue_options, max_step_ns),          // the first layout
    offsetof(du_queue_options, drain_pause_ns),       // + max_step_ns
    offsetof(du_queue_options, max_step_deviations),  // + drain_pause_ns
    offsetof(du_queue_options, max_pending_items),    // + max_step_deviations
    offsetof(du_queue_options, first_step_ns_per_byte),  // + max_pending_items
};
static_assert(std::ranges::all_of(earlier_options_sizes,
                                   [](std::size_t size) { return size % alignof(du_queue_options) == 0; }),
              "an entry is not a sizeof: add the size the struct had, padding included");
static_assert(offsetof(du_queue_options, first_step_ns_per_byte) + sizeof(double) == sizeof(du_queue_options),
              "a field was appended to du_queue_options: add the sizeof the struct had before it above");

// What a caller compiled against another header passed: its fields over the defaults of the rest.
// 0, EINVAL (below sizeof and not a size an earlier layout had) or E2BIG (it sets fields this library
// does not know).
inline int read_sized(const du_queue_options* given, du_queue_options& out) noexcept {
    out = defaults();
    if (given == nullptr) return 0;
    if (given->size < sizeof out && std::ranges::count(earlier_options_sizes, given->size) == 0) return EINVAL;
    // A caller built against a newer header: what it sets beyond what this library knows must be zero.
    const auto* bytes = reinterpret_cast<const unsigned char*>(given);
    for (std::size_t i = sizeof out; i < given->size; ++i)
        if (bytes[i] != 0) return E2BIG;
    std::memcpy(&out, given, std::min(given->size, sizeof out));
    out.size = sizeof out;
    return 0;
}

inline reclaim_options to_options(const du_queue_options& opts) noexcept {
    reclaim_options options;
    options.unmap_chunk_bytes = opts.unmap_chunk_bytes;
    options.max_pending_bytes = opts.max_pending_bytes;
    options.max_delay = std::chrono::nanoseconds{opts.max_delay_ns};
    options.close_on_worker = opts.close_on_worker != 0;
    options.unmap_on_worker = opts.unmap_on_worker != 0;
    options.low_priority_closes = opts.low_priority_closes != 0;
    options.worker_pause = std::chrono::nanoseconds{opts.worker_pause_ns};
    options.prior.unmap_ns_per_byte = opts.unmap_ns_per_byte;
    options.prior.close_ns_per_byte = opts.close_ns_per_byte;
    options.prior.call_overhead = std::chrono::nanoseconds{opts.call_overhead_ns};
    options.initial_capacity = opts.initial_capacity;
    options.max_step = std::chrono::nanoseconds{opts.max_step_ns};
    options.drain_pause = std::chrono::nanoseconds{opts.drain_pause_ns};
    options.max_step_deviations = opts.max_step_deviations;
    options.max_pending_items = static_cast<std::size_t>(std::min<std::uint64_t>(opts.max_pending_items, SIZE_MAX));
    options.first_step_ns_per_byte = opts.first_step_ns_per_byte;
    if (opts.on_error != nullptr) {
        options.on_error = [fn = opts.on_error, data = opts.on_error_data](const reclaim_error& e) {
            const du_error error{e.op == reclaim_error::operation::unmap ? DU_OP_UNMAP : DU_OP_CLOSE, e.error, e.addr,
                                 e.length, e.fd, e.recovered ? 1 : 0};
            fn(data, &error);
        };
    }
    return options;
}

inline bool valid(const du_queue_options& opts) noexcept {
    return opts.unmap_chunk_bytes > 0 && opts.max_delay_ns >= 0 && !validate(to_options(opts));
}

inline std::int64_t ns(std::chrono::nanoseconds d) noexcept { return d.count(); }

inline du_stats to_c(const reclaim_stats& s) noexcept {
    du_stats out{};
    out.size = sizeof out;
    out.items_pushed = s.items_pushed;
    out.bytes_pushed = s.bytes_pushed;
    out.items_reclaimed = s.items_reclaimed;
    out.bytes_unmapped = s.bytes_unmapped;
    out.fds_closed = s.fds_closed;
    out.drains = s.drains;
    out.busy_drains = s.busy_drains;
    out.steps = s.steps;
    out.worker_steps = s.worker_steps;
    out.cap_steps = s.cap_steps;
    out.synchronous_pushes = s.synchronous_pushes;
    out.unmap_errors = s.unmap_errors;
    out.close_errors = s.close_errors;
    out.fallback_unmaps = s.fallback_unmaps;
    out.bytes_leaked = s.bytes_leaked;
    out.peak_pending_bytes = s.peak_pending_bytes;
    out.peak_pending_items = s.peak_pending_items;
    out.drain_p50_ns = ns(s.drain_durations.quantile(0.5));
    out.drain_p99_ns = ns(s.drain_durations.quantile(0.99));
    out.drain_max_ns = ns(s.drain_durations.max());
    out.step_p99_ns = ns(s.step_durations.quantile(0.99));
    out.step_max_ns = ns(s.step_durations.max());
    out.bursts = s.bursts;
    out.burst_items = s.last_burst.items;
    out.burst_bytes = s.last_burst.bytes;
    out.burst_drains = s.last_burst.drains;
    out.burst_duration_ns = ns(s.last_burst.duration);
    out.burst_worst_drain_ns = ns(s.last_burst.worst_drain);
    out.unmap_steps_over_max_step = s.unmap_steps_over_max_step;
    out.unmap_prediction_error_p50_ns = ns(s.unmap_prediction_error.quantile(0.5));
    out.unmap_prediction_error_p99_ns = ns(s.unmap_prediction_error.quantile(0.99));
    out.worker_error = s.worker_error;
    return out;
}

inline du_drain_report to_c(const drain_report& report) noexcept {
    return du_drain_report{report.steps, report.bytes_unmapped, report.fds_closed, report.elapsed.count(),
                           report.pending_bytes, report.pending_items};
}

// The same checks as mapping::adopt, which then owns the range; nothing is taken when they fail.
inline mapping adopt(void* addr, std::size_t length, bool& ok) noexcept {
    std::error_code ec;
    mapping map = mapping::adopt(addr, length, ec);
    ok = !ec;
    return map;
}

inline du_queue* create(reclaim_options options) noexcept {
#if DEFERRED_UNMAP_HAS_EXCEPTIONS
    try {
        return new du_queue{std::move(options)};
    } catch (...) {  // std::bad_alloc: the options were checked, and a worker that cannot start is no error
        errno = ENOMEM;
    }
    return nullptr;
#else
    du_queue* q = new (std::nothrow) du_queue{std::move(options)};
    if (q == nullptr) errno = ENOMEM;
    return q;
#endif
}



}  // namespace deferred_unmap::detail::c_api

extern "C" {

void du_options_init(du_options* opts) noexcept {
    if (opts == nullptr) return;
    const du_queue_options defaults = deferred_unmap::detail::c_api::defaults();
    opts->unmap_chunk_bytes = defaults.unmap_chunk_bytes;
    opts->max_pending_bytes = defaults.max_pending_bytes;
    opts->max_delay_ns = defaults.max_delay_ns;
    opts->close_on_worker = defaults.close_on_worker;
    opts->unmap_on_worker = defaults.unmap_on_worker;
}

du_queue* du_queue_create(const du_options* opts) noexcept {
    if (opts == nullptr) return du_queue_create_with(nullptr);
    const du_queue_options wide = deferred_unmap::detail::c_api::widen(*opts);
    return du_queue_create_with(&wide);
}

void du_queue_options_init_sized(du_queue_options* opts, size_t size) noexcept {
    if (opts == nullptr) return;
    const du_queue_options defaults = deferred_unmap::detail::c_api::defaults();
    std::memcpy(opts, &defaults, std::min(size, sizeof defaults));
    // A caller built against a newer header: read_sized() refuses nonzero bytes in fields this library
    // does not know (it cannot honour them), so they start at zero rather than as the caller left them.
    if (size > sizeof defaults)
        std::memset(reinterpret_cast<unsigned char*>(opts) + sizeof defaults, 0, size - sizeof defaults);
    if (size >= sizeof opts->size) opts->size = size;
}

du_queue* du_queue_create_with(const du_queue_options* opts) noexcept {
    namespace c_api = deferred_unmap::detail::c_api;
    du_queue_options chosen;
    const int error = c_api::read_sized(opts, chosen);
    if (error != 0 || !c_api::valid(chosen)) {
        errno = error != 0 ? error : EINVAL;
        return nullptr;
    }
    return c_api::create(c_api::to_options(chosen));
}

size_t du_queue_pending_items(const du_queue* q) noexcept { return q == nullptr ? 0 : q->queue.pending_items(); }

du_drain_report du_queue_drain_until(du_queue* q, int64_t deadline_ns) noexcept {
    if (q == nullptr) return du_drain_report{};
    const deferred_unmap::reclaim_queue::time_point deadline{std::chrono::nanoseconds{deadline_ns}};
    return deferred_unmap::detail::c_api::to_c(q->queue.drain_until(deadline));
}

int du_queue_ms_until_deadline(const du_queue* q) noexcept {
    if (q == nullptr) return -1;
    const auto deadline = q->queue.next_deadline();
    if (deadline == deferred_unmap::reclaim_queue::time_point::max()) return -1;
    const auto left = deadline - deferred_unmap::reclaim_queue::clock::now();
    if (left <= decltype(left)::zero()) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    // One below INT_MAX: the documented `+ 1` for wl_event_source_timer_update must not overflow.
    return static_cast<int>(std::min<std::int64_t>(ms, std::numeric_limits<int>::max() - 1));
}

int du_queue_worker_fd(const du_queue* q) noexcept { return q == nullptr ? -1 : q->queue.worker_done_fd(); }

void du_queue_worker_clear(du_queue* q) noexcept {
    if (q != nullptr) q->queue.clear_worker_done();
}

void du_queue_stats_sized(const du_queue* q, du_stats* out, size_t size) noexcept {
    if (out == nullptr) return;
    du_stats filled{};
    filled.size = sizeof filled;
    if (q != nullptr) filled = deferred_unmap::detail::c_api::to_c(q->queue.stats());
    // out->size says how much is real: the caller's size, or less where this library knows fewer fields.
    filled.size = std::min(size, sizeof filled);
    std::memcpy(out, &filled, filled.size);
    if (size > sizeof filled) std::memset(reinterpret_cast<unsigned char*>(out) + sizeof filled, 0, size - sizeof filled);
}

void du_queue_destroy(du_queue* q) noexcept { delete q; }

int du_queue_push_region(du_queue* q, int fd, void* addr, size_t length) noexcept {
    if (q == nullptr || fd < 0) return -EINVAL;
    bool ok = false;
    deferred_unmap::mapping map = deferred_unmap::detail::c_api::adopt(addr, length, ok);
    if (!ok) return -EINVAL;
    q->queue.push(deferred_unmap::shm_region{deferred_unmap::unique_fd{fd}, std::move(map)});
    return 0;
}

int du_queue_push_mapping(du_queue* q, void* addr, size_t length) noexcept {
    if (q == nullptr) return -EINVAL;
    bool ok = false;
    deferred_unmap::mapping map = deferred_unmap::detail::c_api::adopt(addr, length, ok);
    if (!ok) return -EINVAL;
    q->queue.push(std::move(map));
    return 0;
}

int du_queue_push_fd(du_queue* q, int fd) noexcept {
    if (q == nullptr || fd < 0) return -EINVAL;
    const std::int64_t bytes = deferred_unmap::posix_os::allocated_bytes(fd);
    if (bytes < 0) return -EBADF;
    // Known, even when 0: a memfd that holds no page frees nothing when closed.
    q->queue.push(deferred_unmap::unique_fd{fd}, static_cast<std::size_t>(std::max<std::int64_t>(bytes, 1)));
    return 0;
}

du_drain_report du_queue_drain(du_queue* q, int64_t budget_ns) noexcept {
    if (q == nullptr) return du_drain_report{};
    return deferred_unmap::detail::c_api::to_c(q->queue.drain(std::chrono::nanoseconds{budget_ns}));
}

void du_queue_flush(du_queue* q) noexcept {
    if (q != nullptr) q->queue.flush();
}

int64_t du_queue_next_deadline_ns(const du_queue* q) noexcept {
    if (q == nullptr) return -1;
    // steady_clock is CLOCK_MONOTONIC on Linux (libstdc++ and libc++), so a timerfd can take this as is.
    const auto deadline = q->queue.next_deadline();
    if (deadline == deferred_unmap::reclaim_queue::time_point::max()) return -1;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
}

size_t du_queue_pending_bytes(const du_queue* q) noexcept { return q == nullptr ? 0 : q->queue.pending_bytes(); }

}  // extern "C"

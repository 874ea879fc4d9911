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

#include <cerrno>
#include <chrono>
#include <new>
#include <system_error>
#include <utility>

#include <sys/stat.h>

#include "c_api.h"
#include "reclaim_queue.hpp"

struct du_queue {
    explicit du_queue(deferred_unmap::reclaim_options options) : queue(std::move(options)) {}
    deferred_unmap::reclaim_queue queue;
};

namespace deferred_unmap::detail::c_api {

inline reclaim_options to_options(const du_options& opts) noexcept {
    reclaim_options options;
    options.unmap_chunk_bytes = opts.unmap_chunk_bytes;
    options.max_pending_bytes = opts.max_pending_bytes;
    options.max_delay = std::chrono::nanoseconds{opts.max_delay_ns};
    options.close_on_worker = opts.close_on_worker != 0;
    options.unmap_on_worker = opts.unmap_on_worker != 0;
    return options;
}

inline bool valid(const du_options& opts) noexcept { return opts.unmap_chunk_bytes > 0 && opts.max_delay_ns >= 0; }

// The same checks as mapping::adopt, which then owns the range; nothing is taken when they fail.
inline mapping adopt(void* addr, std::size_t length, bool& ok) noexcept {
    std::error_code ec;
    mapping map = mapping::adopt(addr, length, ec);
    ok = !ec;
    return map;
}

// Why du_queue_create failed, as an errno value.
inline int errno_of(const std::system_error& error) noexcept {
    return error.code().category() == std::system_category() && error.code().value() > 0 ? error.code().value() : EAGAIN;
}

inline du_queue* create(const du_options& opts) noexcept {
#if DEFERRED_UNMAP_HAS_EXCEPTIONS
    try {
        return new du_queue{to_options(opts)};
    } catch (const std::system_error& error) {  // no thread for the worker
        errno = errno_of(error);
    } catch (...) {  // std::bad_alloc: nothing else is thrown on the way
        errno = ENOMEM;
    }
    return nullptr;
#else
    du_queue* q = new (std::nothrow) du_queue{to_options(opts)};
    if (q == nullptr) errno = ENOMEM;
    return q;
#endif
}

inline std::size_t file_size(int fd) noexcept {
    struct stat st {};
    return ::fstat(fd, &st) == 0 && st.st_size > 0 ? static_cast<std::size_t>(st.st_size) : 0;
}

}  // namespace deferred_unmap::detail::c_api

extern "C" {

void du_options_init(du_options* opts) noexcept {
    if (opts == nullptr) return;
    const deferred_unmap::reclaim_options defaults;
    opts->unmap_chunk_bytes = defaults.unmap_chunk_bytes;
    opts->max_pending_bytes = defaults.max_pending_bytes;
    opts->max_delay_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(defaults.max_delay).count();
    opts->close_on_worker = defaults.close_on_worker ? 1 : 0;
    opts->unmap_on_worker = defaults.unmap_on_worker ? 1 : 0;
}

du_queue* du_queue_create(const du_options* opts) noexcept {
    du_options chosen;
    du_options_init(&chosen);
    if (opts != nullptr) chosen = *opts;
    if (!deferred_unmap::detail::c_api::valid(chosen)) {
        errno = EINVAL;
        return nullptr;
    }
    return deferred_unmap::detail::c_api::create(chosen);
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
    q->queue.push(deferred_unmap::unique_fd{fd}, deferred_unmap::detail::c_api::file_size(fd));
    return 0;
}

du_drain_report du_queue_drain(du_queue* q, int64_t budget_ns) noexcept {
    if (q == nullptr) return du_drain_report{};
    const deferred_unmap::drain_report report = q->queue.drain(std::chrono::nanoseconds{budget_ns});
    return du_drain_report{report.steps, report.bytes_unmapped, report.fds_closed, report.elapsed.count(),
                           report.pending_bytes, report.pending_items};
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

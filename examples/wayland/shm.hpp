// shm.hpp - shm_compositor's own wl_shm: pools are deferred_unmap::shm_region, dead ones go to a reclaimer.
//
// libwayland's wl_display_init_shm closes the client's fd right after mmap, so the final munmap frees
// every page as it returns, on the thread that made it: no close() is left to free them on another.
// This wl_shm keeps the fd with the mapping:
//   wl_shm.create_pool      maps the fd (PROT_READ, MAP_SHARED) into a shm_region
//   wl_shm_pool.resize      maps it again and retires the old view (no buffer reads it any more:
//                           buffers address memory through the pool's current view)
//   wl_shm_pool.destroy     retires the region once no wl_buffer of the pool is left
// Main thread only.
#pragma once

#include <cstdint>

#include <wayland-server-core.h>

#include "reclaimer.hpp"

namespace shm_compositor {

struct shm_counters {
    std::uint64_t pools_created = 0;
    std::uint64_t pools_destroyed = 0;  ///< pool objects gone (their regions retire with the last buffer)
    std::uint64_t resizes = 0;
    std::uint64_t buffers_created = 0;
    std::uint64_t truncated_reads = 0;  ///< reads stopped by SIGBUS: each posted a protocol error
};

/// The wl_shm global. Must outlive every client (destroy clients first).
class shm_global {
public:
    /// Advertises wl_shm v1 with ARGB8888 and XRGB8888. Throws std::runtime_error if it cannot.
    shm_global(wl_display* display, reclaimer& reclaim);
    ~shm_global();
    shm_global(const shm_global&) = delete;
    shm_global& operator=(const shm_global&) = delete;

    [[nodiscard]] const shm_counters& counters() const noexcept { return counters_; }

    // For the pools and buffers this global creates.
    reclaimer& reclaim() noexcept { return reclaim_; }
    shm_counters& counters() noexcept { return counters_; }

private:
    wl_global* global_ = nullptr;
    reclaimer& reclaim_;
    shm_counters counters_;
};

/// True if `buffer` is a wl_buffer made by this wl_shm.
bool is_shm_buffer(wl_resource* buffer) noexcept;

/// Reads every page of an shm wl_buffer into `sum`. On SIGBUS (the client shrank its memfd) posts
/// wl_shm.error.invalid_fd on the buffer, marks its pool unreadable and returns false; later reads of
/// that pool return false at once. Cost: one minor fault per page on first read, one word per page.
bool read_shm_buffer(wl_resource* buffer, std::uint64_t& sum) noexcept;

}  // namespace shm_compositor

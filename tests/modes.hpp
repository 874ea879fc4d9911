// The queue's modes as the tests name them. The library's default closes on a worker thread; tests of
// the inline queue (every call on the draining thread) say so with inline_mode(). Tests whose call
// counts are written in 2 MiB munmap steps say so with two_mib_steps().
#pragma once

#include <chrono>
#include <cstddef>

#include <deferred_unmap/reclaim_options.hpp>

namespace du_modes {

inline deferred_unmap::reclaim_options inline_mode(deferred_unmap::reclaim_options options = {}) {
    options.close_on_worker = false;
    options.unmap_on_worker = false;
    return options;
}

/// Every munmap step exactly 2 MiB (the last of an item shorter), whatever the model predicts.
inline deferred_unmap::reclaim_options two_mib_steps(deferred_unmap::reclaim_options options = {}) {
    options.unmap_chunk_bytes = std::size_t{2} << 20;
    options.max_step = std::chrono::hours{1};
    return options;
}

}  // namespace du_modes

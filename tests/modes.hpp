// The queue's modes as the tests name them. The library's default closes on a worker thread; tests of
// the inline queue (every call on the draining thread) say so with inline_mode().
#pragma once

#include <deferred_unmap/reclaim_options.hpp>

namespace du_modes {

inline deferred_unmap::reclaim_options inline_mode(deferred_unmap::reclaim_options options = {}) {
    options.close_on_worker = false;
    options.unmap_on_worker = false;
    return options;
}

}  // namespace du_modes

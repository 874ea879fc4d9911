// deferred_unmap/deferred_unmap.hpp - everything a compositor needs, in one include.
//
// Guarantees: includes every public header except testing.hpp; see each header's banner.
//
//   #include <deferred_unmap/deferred_unmap.hpp>
//   deferred_unmap::reclaim_queue queue;
//   queue.push(deferred_unmap::shm_region{deferred_unmap::unique_fd{fd}, std::move(map)});
//   queue.drain(std::chrono::milliseconds{1});   // from the frame-commit hook
//   // the destructor flushes the rest
#pragma once

#include "cost_model.hpp"
#include "mapping.hpp"
#include "os.hpp"
#include "reclaim_options.hpp"
#include "reclaim_queue.hpp"
#include "shm_region.hpp"
#include "stats.hpp"
#include "unique_fd.hpp"
#include "version.hpp"

// A reclaim_queue must not be copyable: it owns every pool pushed to it.
#include <deferred_unmap/reclaim_queue.hpp>

void compile_me(deferred_unmap::reclaim_queue& queue) {
#ifdef DEFERRED_UNMAP_EXPECT_FAIL
    deferred_unmap::reclaim_queue copy{queue};
#else
    deferred_unmap::reclaim_queue& copy{queue};
#endif
    static_cast<void>(copy.empty());
}

// A shm_region must not be copyable: its fd and mapping have one owner.
#include <deferred_unmap/shm_region.hpp>

#include <utility>

void compile_me(deferred_unmap::shm_region& region, deferred_unmap::shm_region& other) {
#ifdef DEFERRED_UNMAP_EXPECT_FAIL
    other = region;
#else
    other = std::move(region);
#endif
}

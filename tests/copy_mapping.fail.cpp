// A mapping must not be copyable: two owners would unmap one range twice.
#include <deferred_unmap/mapping.hpp>

#include <utility>

void compile_me(deferred_unmap::mapping& map) {
#ifdef DEFERRED_UNMAP_EXPECT_FAIL
    deferred_unmap::mapping copy = map;
#else
    deferred_unmap::mapping copy = std::move(map);
#endif
    static_cast<void>(copy);
}

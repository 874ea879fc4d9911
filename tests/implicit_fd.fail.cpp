// No implicit conversions: an int must not silently become an owning unique_fd, nor the reverse.
#include <deferred_unmap/unique_fd.hpp>

void take(deferred_unmap::unique_fd fd);

void compile_me(int raw, const deferred_unmap::unique_fd& owned) {
#ifdef DEFERRED_UNMAP_EXPECT_FAIL
    take(raw);
    int back = owned;
#else
    take(deferred_unmap::unique_fd{raw});
    int back = owned.get();
#endif
    static_cast<void>(back);
}

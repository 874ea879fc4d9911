// A unique_fd must not be copyable: two owners would close one descriptor twice.
#include <deferred_unmap/unique_fd.hpp>

#include <utility>

void take(deferred_unmap::unique_fd fd);

void compile_me(deferred_unmap::unique_fd& fd) {
#ifdef DEFERRED_UNMAP_EXPECT_FAIL
    take(fd);
#else
    take(std::move(fd));
#endif
}

// A compositor-shaped program that uses the library from wherever the build found it: one memfd pool
// pushed, drained a frame budget at a time, then checked reclaimed. Exit status 0 only if it was.
#include <deferred_unmap/deferred_unmap.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace du = deferred_unmap;

int main() {
    constexpr std::size_t bytes = std::size_t{1} << 20;
    du::unique_fd fd{::memfd_create("consumer", MFD_CLOEXEC)};
    if (!fd || ::ftruncate(fd.get(), bytes) != 0) return 1;
    const int raw = fd.get();

    du::reclaim_queue queue{{.close_on_worker = true}};
    queue.push(du::shm_region{std::move(fd), du::mapping::map(raw, bytes, PROT_READ, MAP_SHARED)});
    int frames = 0;
    for (; queue.pending_bytes() > 0; ++frames) queue.drain(std::chrono::milliseconds{1});
    queue.flush();

    const bool reclaimed = ::fcntl(raw, F_GETFD) == -1 && queue.stats().items_reclaimed == 1;
    std::printf("deferred_unmap %s from C++: %s after %d frame(s)\n", DEFERRED_UNMAP_VERSION_STRING,
                reclaimed ? "pool reclaimed" : "POOL NOT RECLAIMED", frames);
    return reclaimed ? 0 : 1;
}

// Expected output:
//   deferred_unmap 0.1.0 from C++: pool reclaimed after 1 frame(s)

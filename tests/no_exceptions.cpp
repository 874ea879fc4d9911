// Built with -fno-exceptions: the error_code forms and the queue must be usable without exceptions.
#include <deferred_unmap/deferred_unmap.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>

namespace du = deferred_unmap;

int main() {
    std::error_code ec;
    auto bad = du::mapping::adopt(nullptr, 4096, ec);
    if (!ec || bad) return std::puts("adopt(nullptr) must fail"), 1;

    du::unique_fd fd{::memfd_create("du-noexcept", MFD_CLOEXEC)};
    if (!fd || ::ftruncate(fd.get(), 1 << 20) != 0) return std::puts("memfd"), 1;
    auto view = du::mapping::map(fd.get(), 1 << 20, PROT_READ, MAP_SHARED, ec);
    if (ec) return std::puts("map"), 1;
    du::shm_region region{std::move(fd), std::move(view)};
    auto old = region.resize(2 << 20, PROT_READ, MAP_SHARED, ec);
    if (ec || !old) return std::puts("resize"), 1;

    du::reclaim_queue queue;
    queue.push(std::move(old));
    queue.push(std::move(region));
    while (!queue.empty()) queue.drain(std::chrono::milliseconds{1});
    return queue.stats().items_reclaimed == 2 ? 0 : 1;
}

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

    // Refused options take their defaults: steps stay sized by max_step, not one whole pool each.
    du::reclaim_options refused;
    refused.max_step_deviations = -1.0;
    refused.max_step = std::chrono::nanoseconds{-1};
    refused.prior.unmap_deviation_ns_per_byte = -1.0;
    if (!du::validate(refused)) return std::puts("validate must refuse these"), 1;
    du::reclaim_queue queue{refused};
    queue.push(std::move(old));
    queue.push(std::move(region));
    while (!queue.empty()) queue.drain(std::chrono::milliseconds{1});
    if (du::validate(queue.options())) return std::puts("a refused option was kept"), 1;
    return queue.stats().items_reclaimed == 2 ? 0 : 1;
}

// Built with -fno-exceptions: the error_code forms and the queue must be usable without exceptions.
#include <deferred_unmap/deferred_unmap.hpp>
#include <deferred_unmap/testing.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>

namespace du = deferred_unmap;

namespace {

// KWin builds without exceptions: a worker that cannot be started must leave an inline queue, not abort.
int inline_without_a_thread() {
    const du::testing::thread_creation_failure no_threads;
    du::reclaim_queue queue;
    if (queue.stats().worker_error != EAGAIN) return std::puts("the failed start was not reported"), 1;
    du::unique_fd fd{::memfd_create("du-noexcept-inline", MFD_CLOEXEC)};
    if (!fd || ::ftruncate(fd.get(), 1 << 20) != 0) return std::puts("memfd"), 1;
    std::error_code ec;
    auto view = du::mapping::map(fd.get(), 1 << 20, PROT_READ, MAP_SHARED, ec);
    if (ec) return std::puts("map"), 1;
    const int raw = fd.get();
    queue.push(du::shm_region{std::move(fd), std::move(view)});
    if (queue.drain(std::chrono::seconds{1}).fds_closed != 1) return std::puts("the close was not made inline"), 1;
    if (!queue.empty() || ::fcntl(raw, F_GETFD) != -1) return std::puts("the pool is still there"), 1;
    return 0;
}

}  // namespace

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
    refused.first_step_ns_per_byte = std::nan("");
    if (!du::validate(refused)) return std::puts("validate must refuse these"), 1;
    du::reclaim_queue queue{refused};
    queue.push(std::move(old));
    queue.push(std::move(region));
    while (!queue.empty()) queue.drain(std::chrono::milliseconds{1});
    if (du::validate(queue.options())) return std::puts("a refused option was kept"), 1;
    if (queue.stats().items_reclaimed != 2) return std::puts("not every item was reclaimed"), 1;
    return inline_without_a_thread();
}

// 03_mixed_pools: pools of one size that are not the same work, on real memfds.
//
// A "client" writes every page of each 64 MiB pool. The compositor maps each pool; it never reads the
// first 40 (their munmap has no page tables to clear: cheap), then it reads one (dear). Each run:
//   one read pool:  drain_until(now + 1 ms) right after it is pushed, then flush; the drain's length
//                   and the longest munmap step;
//   60 Hz loop:     a fresh queue taught by 40 unread pools, then 8 read pools, drain(1 ms) per frame;
//                   the longest frame's drain and the longest munmap step.
// Steps are what a learned model would size from the cheap pools alone; max_step is 200 us. Each
// munmap's thread CPU time is kept too: on a busy machine the wall clock also counts preemption.
// Usage: 03_mixed_pools [--runs N]
#include <deferred_unmap/deferred_unmap.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

namespace du = deferred_unmap;
using namespace std::chrono_literals;
using std::chrono::steady_clock;

namespace {

constexpr std::size_t pool_bytes = std::size_t{64} << 20;

// The POSIX calls, with the longest munmap in the calling thread's CPU time kept.
struct cpu_timed_os : du::posix_os {
    static inline std::atomic<std::int64_t> longest_unmap_cpu_ns{0};
    static int unmap(void* addr, std::size_t length) noexcept {
        const auto before = thread_cpu_time();
        const int error = du::posix_os::unmap(addr, length);
        const std::int64_t took = (thread_cpu_time() - before).count();
        if (took > longest_unmap_cpu_ns.load()) longest_unmap_cpu_ns.store(took);
        return error;
    }
};
using queue = du::basic_reclaim_queue<steady_clock, cpu_timed_os>;
using region = du::basic_shm_region<cpu_timed_os>;
using view = du::basic_mapping<cpu_timed_os>;

double ms(std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e6; }

// A pool the client wrote in full; the compositor's mapping of it, read in full when `read`.
region make_pool(bool read) {
    region::fd_type fd{::memfd_create("du-mixed-pool", MFD_CLOEXEC)};
    if (!fd || ::ftruncate(fd.get(), static_cast<off_t>(pool_bytes)) != 0) std::exit(2);
    {
        const du::mapping client = du::mapping::map(fd.get(), pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED);
        std::memset(client.data(), 0x5a, pool_bytes);
    }
    view compositor = view::map(fd.get(), pool_bytes, PROT_READ, MAP_SHARED);
    if (read) {
        volatile const unsigned char* bytes = static_cast<const unsigned char*>(compositor.data());
        unsigned sum = 0;
        for (std::size_t at = 0; at < pool_bytes; at += 4096) sum += bytes[at];
        if (sum == 0) std::exit(2);
    }
    return region{std::move(fd), std::move(compositor)};
}

// The longest munmap step on the wall clock and in CPU time (what a preempted step does not
// inflate), and how many steps' CPU time ran past max_step. Resets the CPU record.
void print_steps(const du::reclaim_stats& s) {
    const std::chrono::nanoseconds cpu{cpu_timed_os::longest_unmap_cpu_ns.exchange(0)};
    std::printf("longest step %.3f ms (CPU %.3f ms), %llu of %llu over max_step in CPU time\n", ms(s.step_durations.max()),
                ms(cpu), static_cast<unsigned long long>(s.unmap_steps_over_max_step),
                static_cast<unsigned long long>(s.steps));
}

void teach_unread_pools(queue& q) {
    for (int i = 0; i < 40; ++i) {
        q.push(make_pool(false));
        while (q.pending_bytes() > 0) q.drain(1ms);
        q.wait_for_worker(10s);
    }
}

void one_read_pool(int run) {
    queue q;
    teach_unread_pools(q);
    cpu_timed_os::longest_unmap_cpu_ns = 0;  // the read pool's steps only
    const double taught = q.model().unmap_ns_per_byte;
    q.push(make_pool(true));
    const auto report = q.drain_until(steady_clock::now() + 1ms);
    q.flush();
    std::printf("run %d  one read pool:  learned %.6f ns/B  drain_until %.2f ms  ", run, taught, ms(report.elapsed));
    print_steps(q.stats());
}

void frame_loop(int run) {
    queue q;
    teach_unread_pools(q);
    cpu_timed_os::longest_unmap_cpu_ns = 0;
    for (int i = 0; i < 8; ++i) q.push(make_pool(true));
    auto frame = steady_clock::now();
    std::chrono::nanoseconds worst{0};
    int frames = 0;
    while (q.pending_bytes() > 0) {
        frame += 16'667us;
        std::this_thread::sleep_until(frame);
        worst = std::max(worst, q.drain(1ms).elapsed);
        ++frames;
    }
    q.flush();
    std::printf("run %d  60 Hz, 8 read:  %d frames  worst drain %.2f ms  ", run, frames, ms(worst));
    print_steps(q.stats());
}

}  // namespace

int main(int argc, char** argv) {
    int runs = 5;
    if (argc == 3 && std::string_view{argv[1]} == "--runs") runs = std::atoi(argv[2]);
    if (runs < 1) return std::fputs("usage: 03_mixed_pools [--runs N]\n", stderr), 2;
    for (int run = 1; run <= runs; ++run) {
        one_read_pool(run);
        frame_loop(run);
    }
    return 0;
}

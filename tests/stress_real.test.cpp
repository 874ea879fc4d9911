// Real-kernel stress: thousands of real memfd pools pushed from four threads while one thread drains
// a budget per simulated frame, in each worker mode; and a process at its vm.max_map_count limit,
// where a chunk's munmap must split a mapping and fails with ENOMEM, so the fallback has to reclaim.
// Afterwards /proc/self/fd and /proc/self/maps must be exactly as before.
//
// DU_STRESS_POOLS=<n> sets the pool count (default 4000; the valgrind stage runs fewer).
#include <doctest/doctest.h>

#include "test_support.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define DU_UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#else
#define DU_UNDER_VALGRIND() false
#endif

// Sanitizer runtimes and valgrind map memory for themselves as threads come and go.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DU_SANITIZED 1
#endif
#endif
#ifndef DU_SANITIZED
#define DU_SANITIZED 0
#endif

using namespace du_test;
using namespace std::chrono_literals;

namespace {

std::size_t pool_count() {
    const char* value = std::getenv("DU_STRESS_POOLS");
    return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 0) : 4000;
}

// A real memfd pool of `bytes`, one byte written every 64 KiB so the kernel has pages to free.
du::shm_region touched_pool(std::size_t bytes) {
    du::unique_fd fd{::memfd_create("du-stress", MFD_CLOEXEC)};
    REQUIRE(fd);
    REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(bytes)) == 0);
    auto view = du::mapping::map(fd.get(), bytes, PROT_READ | PROT_WRITE, MAP_SHARED);
    auto* bytes_view = static_cast<unsigned char*>(view.data());
    for (std::size_t at = 0; at < bytes; at += 64 * 1024) bytes_view[at] = 1;
    return du::shm_region{std::move(fd), std::move(view)};
}

struct stress_result {
    du::reclaim_stats stats;
    std::size_t max_pending_items = 0;
    std::size_t frames = 0;
};

// Four producers push `pools` pools of 4 KiB..1 MiB; this thread drains 1 ms per simulated frame.
stress_result run_stress(du::reclaim_options options, std::size_t pools) {
    stress_result result;
    du::reclaim_queue q{std::move(options)};
    std::atomic<std::size_t> producers_left{4};
    std::vector<std::thread> producers;
    for (unsigned t = 0; t < 4; ++t) {
        producers.emplace_back([&, t] {
            std::mt19937 rng{t + 1};
            std::uniform_int_distribution<std::size_t> pages{1, 256};
            for (std::size_t i = t; i < pools; i += 4) {
                // Stay well inside the descriptor limit when the drain falls behind.
                while (q.pending_items() > 512) std::this_thread::yield();
                q.push(touched_pool(pages(rng) * 4096));
            }
            --producers_left;
        });
    }
    while (producers_left > 0 || !q.empty()) {
        const auto report = q.drain(1ms);
        result.max_pending_items = std::max(result.max_pending_items, report.pending_items);
        ++result.frames;
        std::this_thread::sleep_for(200us);  // the rest of the frame
    }
    for (auto& p : producers) p.join();
    q.flush();
    result.stats = q.stats();
    return result;
}

// Only mappings of memfds: under valgrind and the sanitizers the rest of the map moves with the
// tool's own allocations.
std::string memfd_maps(const std::string& all) {
    std::string out;
    std::size_t start = 0;
    while (start < all.size()) {
        const std::size_t end = all.find('\n', start);
        const std::string line = all.substr(start, end - start);
        if (line.find("memfd:") != std::string::npos) out += line + '\n';
        start = end == std::string::npos ? all.size() : end + 1;
    }
    return out;
}

void check_restored(const std::set<int>& fds, const std::string& before) {
    CHECK(open_fds() == fds);
    if (DU_SANITIZED || DU_UNDER_VALGRIND()) CHECK(memfd_maps(maps()) == memfd_maps(before));
    else CHECK(maps() == before);
}

}  // namespace

TEST_CASE("stress: real pools pushed from four threads while one drains per frame all come back, in every mode") {
    // glibc keeps the stacks of exited threads (up to 40 MiB) and adds malloc arenas as threads
    // contend: mappings that stay but are not the queue's. Small stacks all fit its cache, and one
    // arena never grows new mappings.
    pthread_attr_t small_stacks;
    pthread_attr_init(&small_stacks);
    pthread_attr_setstacksize(&small_stacks, std::size_t{1} << 20U);
    pthread_setattr_default_np(&small_stacks);
    pthread_attr_destroy(&small_stacks);
    mallopt(M_ARENA_MAX, 1);
    const std::size_t pools = pool_count();
    struct mode {
        std::string name;
        bool close_on_worker;
        bool unmap_on_worker;
    };
    for (const mode& m : {mode{"synchronous", false, false}, mode{"close_on_worker", true, false}, mode{"unmap_on_worker", false, true}}) {
        CAPTURE(m.name);
        const du::reclaim_options options{.close_on_worker = m.close_on_worker, .unmap_on_worker = m.unmap_on_worker};
        run_stress(options, 64);  // settles glibc's thread stacks and arenas before the snapshot
        const auto fds = open_fds();
        const auto before = maps();
        const stress_result r = run_stress(options, pools);
        const auto& s = r.stats;
        CHECK(s.items_pushed == pools);
        CHECK(s.items_reclaimed == pools);
        CHECK(s.fds_closed == pools);
        CHECK(s.unmap_errors == 0);
        CHECK(s.close_errors == 0);  // a double close would surface as EBADF here, or as a producer's failed mmap
        CHECK(s.bytes_unmapped == s.bytes_pushed);
        check_restored(fds, before);
        MESSAGE(m.name, ": ", pools, " pools, ", s.bytes_pushed >> 20U, " MiB, ", r.frames, " frames, at most ",
                r.max_pending_items, " pending");
    }
}

namespace {

std::size_t max_map_count() {
    std::ifstream in("/proc/sys/vm/max_map_count");
    std::size_t value = 0;
    in >> value;
    return value;
}

// Brings this process to its mapping limit: one PROT_NONE reservation, every other page of it made
// readable, each mprotect splitting off new VMAs until the kernel refuses with ENOMEM.
struct map_count_filler {
    std::byte* base = nullptr;
    std::size_t length = 0;
    std::size_t splits = 0;
    bool reached_limit = false;

    explicit map_count_filler(std::size_t limit) {
        const std::size_t page = du::detail::page_size();
        length = 2 * limit * page;
        void* addr = ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (addr == MAP_FAILED) return;
        base = static_cast<std::byte*>(addr);
        for (std::size_t at = page; at + page < length; at += 2 * page) {
            if (::mprotect(base + at, page, PROT_READ) != 0) {
                reached_limit = errno == ENOMEM;
                break;
            }
            ++splits;
        }
    }
    ~map_count_filler() {
        if (base != nullptr) ::munmap(base, length);  // from the first VMA's start to the last's end: no split
    }
    map_count_filler(const map_count_filler&) = delete;
    map_count_filler& operator=(const map_count_filler&) = delete;
};

// A pool whose mapping shares its VMA with the mapping below it: one MAP_SHARED mapping of a 2*bytes
// memfd, split in two owners. Unmapping a chunk from the upper half's start splits the VMA in the
// middle, which needs one more VMA; at the limit that is ENOMEM. Unmapping the whole upper half
// only trims the VMA's end, which the kernel allows even at the limit.
struct shared_vma_pool {
    du::shm_region upper;
    du::mapping lower;
};

shared_vma_pool make_shared_vma_pool(std::size_t bytes) {
    du::unique_fd fd{::memfd_create("du-mapcount", MFD_CLOEXEC)};
    REQUIRE(fd);
    REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(2 * bytes)) == 0);
    auto whole = du::mapping::map(fd.get(), 2 * bytes, PROT_READ | PROT_WRITE, MAP_SHARED);
    std::memset(whole.data(), 1, 2 * bytes);
    const auto range = whole.release();
    return {du::shm_region{std::move(fd), du::mapping::adopt(range.data() + bytes, bytes)},
            du::mapping::adopt(range.data(), bytes)};
}

}  // namespace

TEST_CASE("stress: at the vm.max_map_count limit a chunk's split fails with ENOMEM and the fallback still reclaims everything") {
    if (DU_SANITIZED || DU_UNDER_VALGRIND()) {
        MESSAGE("skipped under sanitizers and valgrind: their own mappings count against the limit");
        return;
    }
    const std::size_t limit = max_map_count();
    REQUIRE(limit > 0);
    if (limit > (std::size_t{1} << 20U)) {
        MESSAGE("skipped: vm.max_map_count ", limit, " is too high to reach in a test (65530 is the kernel default)");
        return;
    }
    constexpr std::size_t pools = 16;
    constexpr std::size_t pool_bytes = std::size_t{6} << 20U;  // three 2 MiB chunks per half
    const auto fds = open_fds();
    const auto before = maps();
    std::atomic<std::size_t> enomem{0}, recovered{0}, other_errors{0};
    du::reclaim_stats s;
    std::size_t splits = 0;
    bool reached_limit = false;
    {
        // Everything that allocates happens before the process is at its limit.
        du::reclaim_queue q{{.initial_capacity = 4 * pools, .on_error = [&](const du::reclaim_error& e) {
                                 if (e.error == ENOMEM) ++enomem;
                                 else ++other_errors;
                                 if (e.recovered) ++recovered;
                             }}};
        std::vector<shared_vma_pool> made;
        made.reserve(pools);
        for (std::size_t i = 0; i < pools; ++i) made.push_back(make_shared_vma_pool(pool_bytes));
        // Every upper half first: each one's fallback leaves the VMA count as it was, so each of their
        // first chunks meets the limit; only unmapping a lower half in full gives a VMA back.
        for (auto& p : made) q.push(std::move(p.upper));
        for (auto& p : made) q.push(std::move(p.lower));
        {
            const map_count_filler filler{limit};
            splits = filler.splits;
            reached_limit = filler.reached_limit;
            while (!q.empty()) q.drain(1ms);
        }
        s = q.stats();
    }
    CHECK(reached_limit);
    CHECK(enomem == pools);             // one failed first chunk per upper half
    CHECK(recovered == pools);          // each recovered by one munmap of the whole rest
    CHECK(other_errors == 0);
    CHECK(s.unmap_errors == pools);
    CHECK(s.fallback_unmaps == pools);
    CHECK(s.bytes_leaked == 0);
    CHECK(s.bytes_unmapped == s.bytes_pushed);
    CHECK(s.items_reclaimed == 2 * pools);
    CHECK(s.close_errors == 0);
    CHECK(open_fds() == fds);
    CHECK(maps() == before);
    MESSAGE("max_map_count ", limit, ": ", splits, " splits to reach it, ", enomem.load(), " ENOMEM chunks recovered");
}

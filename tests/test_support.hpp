// Shared by the tests: the scripted queue type and /proc snapshots for the real-syscall tests.
#pragma once

#include <deferred_unmap/deferred_unmap.hpp>
#include <deferred_unmap/testing.hpp>

#include "modes.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>

namespace du_test {

using du_modes::inline_mode;
using du_modes::two_mib_steps;

namespace du = deferred_unmap;
namespace dt = deferred_unmap::testing;
using scripted_queue = du::basic_reclaim_queue<dt::manual_clock, dt::scripted_os>;
using call_kind = dt::os_call::kind;

constexpr std::size_t mib = std::size_t{1} << 20;

/// The descriptors open in this process right now.
inline std::set<int> open_fds() {
    std::set<int> fds;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
        fds.insert(std::stoi(entry.path().filename().string()));
    return fds;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitizer_allocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool sanitizer_allocator = true;
#else
inline constexpr bool sanitizer_allocator = false;
#endif
#else
inline constexpr bool sanitizer_allocator = false;
#endif

/// /proc/self/maps, every line but the brk heap's, whose end moves with ordinary allocations. Under a
/// sanitizer, whose allocator maps and unmaps anonymous memory at will, only the named mappings
/// (files and memfds: everything a pool can leave behind) are kept.
inline std::string maps() {
    std::ifstream in("/proc/self/maps");
    std::string all;
    for (std::string line; std::getline(in, line);) {
        if (line.find("[heap]") != std::string::npos) continue;
        if (sanitizer_allocator && line.find('/') == std::string::npos) continue;
        all += line + '\n';
    }
    return all;
}

/// A real memfd pool of `bytes`, written through a client mapping and mapped read-only as a compositor does.
inline du::shm_region real_pool(std::size_t bytes) {
    du::unique_fd fd{::memfd_create("du-test", MFD_CLOEXEC)};
    if (!fd) throw std::system_error(errno, std::system_category(), "memfd_create");
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
        throw std::system_error(errno, std::system_category(), "ftruncate");
    {
        auto client = du::mapping::map(fd.get(), bytes, PROT_READ | PROT_WRITE, MAP_SHARED);
        std::memset(client.data(), 0x42, bytes);
    }
    auto view = du::mapping::map(fd.get(), bytes, PROT_READ, MAP_SHARED);
    return du::shm_region{std::move(fd), std::move(view)};
}

/// The model whose predictions are exactly what a script of these linear costs charges.
inline du::cost_model linear_model(double unmap_ns_per_byte, double close_ns_per_byte, std::chrono::nanoseconds overhead) {
    du::cost_model m;
    m.unmap_ns_per_byte = unmap_ns_per_byte;
    m.close_ns_per_byte = close_ns_per_byte;
    m.call_overhead = overhead;
    return m;
}

/// scripted_os's required calls, for test Os policies that leave out or replace its optional ones.
struct scripted_calls {
    static void* map(void* hint, std::size_t length, int prot, int flags, int fd, off_t offset, int& error) noexcept {
        return dt::scripted_os::map(hint, length, prot, flags, fd, offset, error);
    }
    static int unmap(void* addr, std::size_t length) noexcept { return dt::scripted_os::unmap(addr, length); }
    static int close(int fd) noexcept { return dt::scripted_os::close(fd); }
};

/// testing::make_region for a queue whose Os wraps scripted_os.
template <class Os>
du::basic_shm_region<Os> make_region_for(std::size_t bytes) {
    const int fd = dt::script().open_fd(bytes);
    std::error_code ec;
    auto map = du::basic_mapping<Os>::map(fd, bytes, PROT_READ, MAP_SHARED, 0, ec);
    return {du::basic_unique_fd<Os>{fd}, std::move(map)};
}

}  // namespace du_test

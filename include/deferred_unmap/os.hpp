// deferred_unmap/os.hpp - the OS policy: the system calls the library makes.
//
// Every handle and the queue reach the kernel only through an `Os` policy type, so tests can swap in
// `testing::scripted_os` and inject costs and errors. A policy is a type with three static noexcept
// functions that return the error number instead of touching errno:
//
//   struct my_os {
//     static void* map(void* hint, std::size_t len, int prot, int flags, int fd, off_t off, int& error) noexcept;
//     static int unmap(void* addr, std::size_t len) noexcept;  // 0 or an errno value
//     static int close(int fd) noexcept;                      // 0 or an errno value; never retried
//   };
//
// Three more are optional: thread_cpu_time() (the model learns from CPU time, not wall time),
// allocated_bytes() (a descriptor pushed without a size gets one before its close is predicted) and
// pause() (a drain sleeps drain_pause between munmap steps). `posix_os` is the real one: mmap(2),
// munmap(2), close(2), clock_gettime(2), fstat(2), clock_nanosleep(2).
#pragma once

#include <cerrno>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ctime>

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#define DEFERRED_UNMAP_HAS_EXCEPTIONS 1
#else
#define DEFERRED_UNMAP_HAS_EXCEPTIONS 0
#endif

namespace deferred_unmap {

/// The real system calls. Stateless; every function is async-signal-safe and thread-safe.
struct posix_os {
    /// mmap(2). Cost: one syscall. Returns MAP_FAILED and sets `error` on failure.
    static void* map(void* hint, std::size_t length, int prot, int flags, int fd, off_t offset,
                     int& error) noexcept {
        void* addr = ::mmap(hint, length, prot, flags, fd, offset);
        error = addr == MAP_FAILED ? errno : 0;
        return addr;
    }
    /// munmap(2). Cost: one syscall; takes the process's mmap_lock for writing (Linux 6.18 then holds it
    /// for reading while it clears the page tables), and where it drops a file's last reference, frees
    /// that file's pages on return, after the lock. Returns 0 or errno.
    static int unmap(void* addr, std::size_t length) noexcept {
        return ::munmap(addr, length) == 0 ? 0 : errno;
    }
    /// close(2), exactly once: on Linux the descriptor is gone even when close reports EINTR or EIO,
    /// so a retry could close a descriptor another thread has just been given. Returns 0 or errno.
    static int close(int fd) noexcept { return ::close(fd) == 0 ? 0 : errno; }
    /// CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID), or -1 ns when the clock cannot
    /// be read. Cost: one clock_gettime, a real syscall on Linux (the vDSO does not serve this
    /// clock). The queue learns from it, so time the thread spent
    /// preempted does not count as the cost of the call it interrupted.
    static std::chrono::nanoseconds thread_cpu_time() noexcept {
        timespec ts{};
        if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return std::chrono::nanoseconds{-1};
        return std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec};
    }
    /// Bytes the file behind `fd` holds in memory (fstat's st_blocks * 512: for a memfd, the pages a
    /// close of its last reference frees), or -1 when fstat fails (EBADF: not open). Cost: one fstat.
    static std::int64_t allocated_bytes(int fd) noexcept {
        struct stat st {};
        if (::fstat(fd, &st) != 0) return -1;
        return static_cast<std::int64_t>(st.st_blocks) * 512;
    }
    /// Sleeps about `d` (clock_nanosleep on CLOCK_MONOTONIC; the kernel may add the thread's timer
    /// slack, 50 us by default). A signal cuts it short and it is not resumed: the caller reads its
    /// clock after. Cost: one syscall; no allocation.
    static void pause(std::chrono::nanoseconds d) noexcept {
        if (d <= std::chrono::nanoseconds::zero()) return;
        const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(d);
        const timespec ts{static_cast<std::time_t>(seconds.count()), static_cast<long>((d - seconds).count())};
        ::clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
    }
};

/// What a type needs to serve as the `Os` policy of the handles and the queue.
template <class Os>
concept os_policy = requires(void* addr, std::size_t length, int fd, off_t offset, int& error) {
    { Os::map(addr, length, 0, 0, fd, offset, error) } noexcept -> std::same_as<void*>;
    { Os::unmap(addr, length) } noexcept -> std::same_as<int>;
    { Os::close(fd) } noexcept -> std::same_as<int>;
};

/// An Os policy that can also say how much CPU time the calling thread has used (optional: a policy
/// without it is learned from wall time alone).
template <class Os>
concept has_thread_cpu_time = requires {
    { Os::thread_cpu_time() } noexcept -> std::same_as<std::chrono::nanoseconds>;
};

/// An Os policy that can also say what a descriptor's close may free (optional: without it, a close
/// pushed with no size is predicted to fit no deadline).
template <class Os>
concept has_allocated_bytes = requires(int fd) {
    { Os::allocated_bytes(fd) } noexcept -> std::same_as<std::int64_t>;
};

/// An Os policy that can also sleep (optional: without it, reclaim_options::drain_pause is ignored).
template <class Os>
concept has_pause = requires(std::chrono::nanoseconds d) {
    { Os::pause(d) } noexcept -> std::same_as<void>;
};

static_assert(os_policy<posix_os>, "posix_os must model os_policy");
static_assert(has_thread_cpu_time<posix_os>, "posix_os reads the thread's CPU clock");
static_assert(has_pause<posix_os>, "posix_os can sleep between steps");
static_assert(has_allocated_bytes<posix_os>, "posix_os sizes a descriptor's close");

namespace detail {

/// The page size, read once. munmap needs page-aligned addresses; chunks are page multiples.
inline std::size_t page_size() noexcept {
    static const std::size_t size = [] {
        const long value = ::sysconf(_SC_PAGESIZE);
        return value > 0 ? static_cast<std::size_t>(value) : std::size_t{4096};
    }();
    return size;
}

inline std::size_t round_up_to_page(std::size_t bytes) noexcept {
    const std::size_t page = page_size();
    return (bytes + page - 1) / page * page;
}

inline bool is_page_aligned(const void* addr) noexcept {
    return reinterpret_cast<std::uintptr_t>(addr) % page_size() == 0;
}

/// Keeps errno as it was across a teardown call, so a destructor running during error handling
/// does not clobber the errno the caller is about to read.
class errno_saver {
public:
    errno_saver() noexcept : saved_(errno) {}
    ~errno_saver() { errno = saved_; }
    errno_saver(const errno_saver&) = delete;
    errno_saver& operator=(const errno_saver&) = delete;

private:
    int saved_;
};

}  // namespace detail
}  // namespace deferred_unmap

// deferred_unmap/unique_fd.hpp - a move-only owner of one file descriptor.
//
// Guarantees: the descriptor is closed exactly once (by the destructor, reset() or a queue it was
// pushed to); close() is never retried on EINTR, because on Linux the descriptor is already gone and a
// retry could close one another thread has just opened; reset() and the destructor leave errno as it was.
//
//   deferred_unmap::unique_fd fd{memfd_create("pool", MFD_CLOEXEC)};
//   if (!fd) throw std::system_error(errno, std::system_category(), "memfd_create");
//   ftruncate(fd.get(), size);
//   queue.push(std::move(fd));   // or let it go out of scope: closed here
//   int raw = other.release();   // the caller closes raw now
#pragma once

#include <utility>

#include "os.hpp"

namespace deferred_unmap {

template <class Os = posix_os>
class basic_unique_fd {
    static_assert(os_policy<Os>, "basic_unique_fd<Os>: Os must provide static noexcept map/unmap/close");

public:
    /// Empty. Cost: none.
    constexpr basic_unique_fd() noexcept = default;
    /// Takes ownership of `fd` (a negative value means empty). Cost: none; no syscall.
    constexpr explicit basic_unique_fd(int fd) noexcept : fd_(fd < 0 ? -1 : fd) {}

    basic_unique_fd(const basic_unique_fd&) = delete;
    basic_unique_fd& operator=(const basic_unique_fd&) = delete;

    constexpr basic_unique_fd(basic_unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    /// Closes what this held, then takes `other`'s descriptor. Self-move is a no-op.
    basic_unique_fd& operator=(basic_unique_fd&& other) noexcept {
        if (this != &other) reset(std::exchange(other.fd_, -1));
        return *this;
    }

    /// Closes the descriptor, if any. Never throws; errno is preserved.
    ~basic_unique_fd() { reset(); }

    /// The descriptor, or -1. Cost: none.
    [[nodiscard]] constexpr int get() const noexcept { return fd_; }
    constexpr explicit operator bool() const noexcept { return fd_ >= 0; }

    /// Gives up ownership without closing; the caller must close the result. Cost: none.
    [[nodiscard]] constexpr int release() noexcept { return std::exchange(fd_, -1); }

    /// Closes the current descriptor (once, errors ignored, errno preserved) and owns `fd` instead.
    /// Cost: one close(2) when non-empty; may block as long as close(2) does (freeing a memfd's pages).
    void reset(int fd = -1) noexcept {
        const int old = std::exchange(fd_, fd < 0 ? -1 : fd);
        if (old >= 0 && old != fd_) {
            detail::errno_saver keep_errno;
            static_cast<void>(Os::close(old));
        }
    }

    friend constexpr void swap(basic_unique_fd& a, basic_unique_fd& b) noexcept { std::swap(a.fd_, b.fd_); }

private:
    int fd_ = -1;
};

using unique_fd = basic_unique_fd<posix_os>;

}  // namespace deferred_unmap

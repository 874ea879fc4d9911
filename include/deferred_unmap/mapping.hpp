// deferred_unmap/mapping.hpp - a move-only owner of one mmap'd range.
//
// Guarantees: the range is unmapped exactly once (by the destructor, reset() or a queue it was pushed
// to), with errno preserved. A mapping is never empty-but-valid: the factories refuse a null or
// MAP_FAILED address, an address that is not page-aligned and a zero length, and report a failing mmap.
// Each factory has a throwing form and a `std::error_code&` form for builds without exceptions.
//
//   auto map = deferred_unmap::mapping::map(fd.get(), size, PROT_READ, MAP_SHARED);
//   std::error_code ec;
//   auto other = deferred_unmap::mapping::adopt(addr, length, ec);   // empty on error, ec says why
//   if (ec) log("cannot adopt: %s", ec.message().c_str());
//   queue.push(std::move(map));                                      // unmapped later, in slices
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <system_error>
#include <utility>

#include "os.hpp"  // first: defines DEFERRED_UNMAP_HAS_EXCEPTIONS

#if DEFERRED_UNMAP_HAS_EXCEPTIONS
#include <stdexcept>
#endif

namespace deferred_unmap {

template <class Os = posix_os>
class basic_mapping {
    static_assert(os_policy<Os>, "basic_mapping<Os>: Os must provide static noexcept map/unmap/close");

public:
    /// Empty. Cost: none.
    constexpr basic_mapping() noexcept = default;

    /// Owns [addr, addr + length), which the caller mapped. On bad input returns an empty mapping and
    /// sets `ec` to std::errc::invalid_argument; otherwise clears `ec`. Cost: none; no syscall.
    [[nodiscard]] static basic_mapping adopt(void* addr, std::size_t length, std::error_code& ec) noexcept {
        if (invalid_range(addr, length) != nullptr) {
            ec = std::make_error_code(std::errc::invalid_argument);
            return {};
        }
        ec.clear();
        return basic_mapping{addr, length};
    }

    /// mmap(nullptr, length, prot, flags, fd, offset). On failure returns an empty mapping and sets `ec`
    /// (std::errc::invalid_argument for a zero length, else mmap's errno). Cost: one mmap(2).
    [[nodiscard]] static basic_mapping map(int fd, std::size_t length, int prot, int flags, off_t offset,
                                           std::error_code& ec) noexcept {
        if (length == 0) {
            ec = std::make_error_code(std::errc::invalid_argument);
            return {};
        }
        int error = 0;
        void* addr = Os::map(nullptr, length, prot, flags, fd, offset, error);
        if (addr == MAP_FAILED) {
            ec = std::error_code(error, std::system_category());
            return {};
        }
        ec.clear();
        return basic_mapping{addr, length};
    }
    [[nodiscard]] static basic_mapping map(int fd, std::size_t length, int prot, int flags,
                                           std::error_code& ec) noexcept {
        return map(fd, length, prot, flags, 0, ec);
    }

#if DEFERRED_UNMAP_HAS_EXCEPTIONS
    /// As adopt(addr, length, ec), but throws std::invalid_argument saying what is wrong.
    [[nodiscard]] static basic_mapping adopt(void* addr, std::size_t length) {
        if (const char* why = invalid_range(addr, length)) throw std::invalid_argument(why);
        return basic_mapping{addr, length};
    }

    /// As map(..., ec), but throws std::invalid_argument (zero length) or std::system_error (mmap's errno).
    [[nodiscard]] static basic_mapping map(int fd, std::size_t length, int prot, int flags, off_t offset = 0) {
        if (length == 0) throw std::invalid_argument("deferred_unmap::mapping::map: zero length");
        std::error_code ec;
        basic_mapping result = map(fd, length, prot, flags, offset, ec);
        if (ec) throw std::system_error(ec, "deferred_unmap::mapping::map: mmap");
        return result;
    }
#endif

    basic_mapping(const basic_mapping&) = delete;
    basic_mapping& operator=(const basic_mapping&) = delete;

    constexpr basic_mapping(basic_mapping&& other) noexcept
        : addr_(std::exchange(other.addr_, nullptr)), length_(std::exchange(other.length_, 0)) {}
    /// Unmaps what this held, then takes `other`'s range. Self-move is a no-op.
    basic_mapping& operator=(basic_mapping&& other) noexcept {
        if (this != &other) {
            reset();
            addr_ = std::exchange(other.addr_, nullptr);
            length_ = std::exchange(other.length_, 0);
        }
        return *this;
    }

    /// Unmaps the range, if any. Never throws; errno is preserved.
    ~basic_mapping() { reset(); }

    /// The start of the range, or nullptr. Cost: none.
    [[nodiscard]] constexpr void* data() const noexcept { return addr_; }
    /// The length given at creation (the kernel rounds it up to whole pages). Cost: none.
    [[nodiscard]] constexpr std::size_t size() const noexcept { return length_; }
    /// The range as bytes. Cost: none.
    [[nodiscard]] std::span<std::byte> bytes() const noexcept { return {static_cast<std::byte*>(addr_), length_}; }
    constexpr explicit operator bool() const noexcept { return addr_ != nullptr; }

    /// Gives up ownership without unmapping; the caller must munmap the result. Cost: none.
    [[nodiscard]] std::span<std::byte> release() noexcept {
        return {static_cast<std::byte*>(std::exchange(addr_, nullptr)), std::exchange(length_, 0)};
    }

    /// Unmaps now (errors ignored, errno preserved) and becomes empty.
    /// Cost: one munmap(2) of the whole range, holding mmap_lock while it clears the page tables (and
    /// freeing the file's pages on return if this was its last reference); may block. Push to a queue
    /// to defer it.
    void reset() noexcept {
        if (addr_ == nullptr) return;
        detail::errno_saver keep_errno;
        static_cast<void>(Os::unmap(std::exchange(addr_, nullptr), std::exchange(length_, 0)));
    }

    friend void swap(basic_mapping& a, basic_mapping& b) noexcept {
        std::swap(a.addr_, b.addr_);
        std::swap(a.length_, b.length_);
    }

private:
    constexpr basic_mapping(void* addr, std::size_t length) noexcept : addr_(addr), length_(length) {}

    static const char* invalid_range(void* addr, std::size_t length) noexcept {
        if (addr == nullptr) return "deferred_unmap::mapping::adopt: null address";
        if (addr == MAP_FAILED) return "deferred_unmap::mapping::adopt: MAP_FAILED address";
        if (!detail::is_page_aligned(addr)) return "deferred_unmap::mapping::adopt: address not page-aligned";
        if (length == 0) return "deferred_unmap::mapping::adopt: zero length";
        // Such a range cannot exist, and its page-rounded length would wrap to zero.
        if (length - 1 > std::numeric_limits<std::uintptr_t>::max() - reinterpret_cast<std::uintptr_t>(addr))
            return "deferred_unmap::mapping::adopt: range wraps past the end of the address space";
        return nullptr;
    }

    void* addr_ = nullptr;
    std::size_t length_ = 0;
};

using mapping = basic_mapping<posix_os>;

}  // namespace deferred_unmap

// deferred_unmap/shm_region.hpp - a client shm pool: its memfd and the compositor's mapping of it.
//
// Guarantees: the mapping is always unmapped before the descriptor is closed, whatever order the
// members are declared in. Pages are freed where the last reference to the memfd goes: closed first,
// the mapping holds it, and munmap frees every page as it returns to user space, on the calling thread
// (after releasing mmap_lock, which it holds as long in either order); unmapped first, close() frees
// them, which takes no mmap_lock and can run on another thread (docs/notes/kernel.md). resize() maps
// the pool anew and hands the old mapping back to be deferred.
//
//   deferred_unmap::shm_region pool{deferred_unmap::unique_fd{fd},
//                                   deferred_unmap::mapping::map(fd, size, PROT_READ, MAP_SHARED)};
//   auto old = pool.resize(new_size, PROT_READ, MAP_SHARED);   // wl_shm_pool.resize
//   queue.push(std::move(old));                                // buffers still on `old` finish first
//   queue.push(std::move(pool));                               // wl_shm_pool.destroy, last buffer gone
#pragma once

#include <cstddef>
#include <span>
#include <system_error>
#include <utility>

#include "mapping.hpp"
#include "unique_fd.hpp"

namespace deferred_unmap {

template <class Os = posix_os>
class basic_shm_region {
public:
    using fd_type = basic_unique_fd<Os>;
    using mapping_type = basic_mapping<Os>;

    /// Empty. Cost: none.
    basic_shm_region() noexcept = default;
    /// Owns both. `map` is normally a mapping of `fd`. Cost: none; no syscall.
    basic_shm_region(fd_type fd, mapping_type map) noexcept : map_(std::move(map)), fd_(std::move(fd)) {}

    basic_shm_region(const basic_shm_region&) = delete;
    basic_shm_region& operator=(const basic_shm_region&) = delete;
    basic_shm_region(basic_shm_region&&) noexcept = default;
    /// Tears down what this held (unmap, then close), then takes `other`'s parts. Self-move is a no-op.
    basic_shm_region& operator=(basic_shm_region&& other) noexcept {
        if (this != &other) {
            reset();
            map_ = std::move(other.map_);
            fd_ = std::move(other.fd_);
        }
        return *this;
    }

    /// Unmaps, then closes. Never throws; errno is preserved.
    ~basic_shm_region() { reset(); }

    /// The pool's descriptor, or -1. Cost: none.
    [[nodiscard]] int fd() const noexcept { return fd_.get(); }
    /// The compositor's view of the pool, or nullptr. Cost: none.
    [[nodiscard]] void* data() const noexcept { return map_.data(); }
    /// The mapped length. Cost: none.
    [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }
    [[nodiscard]] std::span<std::byte> bytes() const noexcept { return map_.bytes(); }
    explicit operator bool() const noexcept { return fd_ || map_; }

    /// Maps the pool again at `new_length` and returns the old mapping, still mapped, so the host can
    /// keep it while buffers point into it and then push it to a queue. On failure this region is
    /// unchanged, the result is empty and `ec` says why. Cost: one mmap(2).
    [[nodiscard]] mapping_type resize(std::size_t new_length, int prot, int flags, std::error_code& ec) noexcept {
        mapping_type fresh = mapping_type::map(fd_.get(), new_length, prot, flags, 0, ec);
        if (ec) return {};
        return std::exchange(map_, std::move(fresh));
    }

#if DEFERRED_UNMAP_HAS_EXCEPTIONS
    /// As resize(..., ec), but throws std::invalid_argument or std::system_error.
    [[nodiscard]] mapping_type resize(std::size_t new_length, int prot, int flags) {
        return std::exchange(map_, mapping_type::map(fd_.get(), new_length, prot, flags));
    }
#endif

    /// What release() hands back. Members are destroyed mapping first, so dropping it unmaps, then closes.
    struct parts {
        fd_type fd;
        mapping_type map;
    };

    /// Gives up both parts, still open and mapped (`auto [fd, map] = region.release();`). Cost: none.
    [[nodiscard]] parts release() noexcept { return {std::move(fd_), std::move(map_)}; }

    /// Unmaps, then closes, now. Errors ignored, errno preserved. May block (munmap and close).
    void reset() noexcept {
        map_.reset();
        fd_.reset();
    }

private:
    // Declared mapping-first only for readability; reset() fixes the order, not the declaration.
    mapping_type map_;
    fd_type fd_;
};

using shm_region = basic_shm_region<posix_os>;

}  // namespace deferred_unmap

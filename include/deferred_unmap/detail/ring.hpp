// deferred_unmap/detail/ring.hpp - a growable FIFO of trivially copyable items that never throws.
#pragma once

#include <atomic>
#include <cstddef>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace deferred_unmap::detail {

/// Test seam (see testing::allocation_failure): when set, every ring growth asks it first, and a false
/// answer fails the growth as an exhausted heap would. One relaxed load per growth; never set in hosts.
inline std::atomic<bool (*)(std::size_t bytes)> allocation_gate{nullptr};

/// Circular buffer with power-of-two capacity. Growth is the only allocation; when it fails, push_back
/// returns false and the ring is unchanged, so the caller can tear the item down instead of losing it.
template <class T>
class ring {
    static_assert(std::is_trivially_copyable_v<T>, "ring<T> copies items with plain assignment");

public:
    ring() noexcept = default;
    ring(ring&& other) noexcept
        : items_(std::move(other.items_)), capacity_(std::exchange(other.capacity_, 0)),
          head_(std::exchange(other.head_, 0)), size_(std::exchange(other.size_, 0)) {}
    ring& operator=(ring&& other) noexcept {
        ring moved(std::move(other));
        std::swap(items_, moved.items_);
        std::swap(capacity_, moved.capacity_);
        std::swap(head_, moved.head_);
        std::swap(size_, moved.size_);
        return *this;
    }
    ring(const ring&) = delete;
    ring& operator=(const ring&) = delete;
    ~ring() = default;

    /// Room for at least `count` items. Cost: one allocation when it grows. Returns false on failure.
    bool reserve(std::size_t count) noexcept {
        if (count <= capacity_) return true;
        // Doubling towards a larger count would wrap to zero and never end.
        if (count > std::numeric_limits<std::size_t>::max() / 2 / sizeof(T)) return false;
        std::size_t grown = capacity_ == 0 ? 16 : capacity_;
        while (grown < count) grown *= 2;
        if (const auto gate = allocation_gate.load(std::memory_order_relaxed); gate != nullptr && !gate(grown * sizeof(T)))
            return false;
        std::unique_ptr<T[]> fresh(new (std::nothrow) T[grown]);
        if (!fresh) return false;
        for (std::size_t i = 0; i < size_; ++i) fresh[i] = (*this)[i];
        items_ = std::move(fresh);
        capacity_ = grown;
        head_ = 0;
        return true;
    }

    /// Appends. Amortised O(1); allocates only when full. Returns false (and keeps nothing) on failure.
    bool push_back(const T& item) noexcept {
        if (size_ == capacity_ && !reserve(size_ + 1)) return false;
        items_[(head_ + size_) & (capacity_ - 1)] = item;
        ++size_;
        return true;
    }

    /// Removes the oldest item. Precondition: !empty(). O(1).
    T pop_front() noexcept {
        T item = items_[head_];
        head_ = (head_ + 1) & (capacity_ - 1);
        --size_;
        return item;
    }

    [[nodiscard]] const T& front() const noexcept { return items_[head_]; }
    [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return items_[(head_ + i) & (capacity_ - 1)]; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

private:
    std::unique_ptr<T[]> items_;
    std::size_t capacity_ = 0;
    std::size_t head_ = 0;
    std::size_t size_ = 0;
};

}  // namespace deferred_unmap::detail

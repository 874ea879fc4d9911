// deferred_unmap/testing.hpp - a manual clock and a scripted OS, for deterministic tests of budgets.
//
// Guarantees: nothing here touches the kernel. scripted_os hands out fake descriptors (lowest free
// number first, as the kernel does, so reuse is exercised) and fake page-aligned ranges, records every
// call, advances manual_clock by a scripted cost per call (a pause by what it asked to sleep), and
// fails the calls a test chooses. It also notices misuse: closing a descriptor that is not open,
// unmapping bytes that are not mapped. A call's cost also advances the calling thread's cpu_clock,
// per thread as CLOCK_THREAD_CPUTIME_ID is, so a queue's worker and its draining thread each learn
// from their own calls only, however their calls interleave.
//
//   auto& os = deferred_unmap::testing::reset();                 // fresh clock and script
//   os.close_ns_per_byte = 0.1;                                   // a 20 MiB close costs ~2 ms
//   using queue = deferred_unmap::basic_reclaim_queue<testing::manual_clock, testing::scripted_os>;
//   queue q; q.push(testing::make_region(20 << 20)); q.drain(std::chrono::milliseconds{1});
//   CHECK(os.count(testing::os_call::kind::unmap) == 1);
//
// Not part of <deferred_unmap/deferred_unmap.hpp>. The script is process-global: one test at a time.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "detail/library_thread.hpp"
#include "detail/ring.hpp"
#include "mapping.hpp"
#include "os.hpp"
#include "shm_region.hpp"
#include "unique_fd.hpp"

namespace deferred_unmap::testing {

/// A std::chrono clock that moves only when told. Thread-safe; process-global.
struct manual_clock {
    using rep = std::int64_t;
    using period = std::nano;
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<manual_clock>;
    static constexpr bool is_steady = true;

    static time_point now() noexcept { return time_point{duration{ticks().load(std::memory_order_relaxed)}}; }
    static void advance(duration d) noexcept { ticks().fetch_add(d.count(), std::memory_order_relaxed); }
    static void set(time_point t) noexcept { ticks().store(t.time_since_epoch().count(), std::memory_order_relaxed); }

private:
    static std::atomic<rep>& ticks() noexcept {
        static std::atomic<rep> value{0};
        return value;
    }
};

/// The CPU time scripted_os reports for the calling thread: the scripted costs of that thread's calls
/// (and what a test advances by hand on it), so it differs from manual_clock by the scripted
/// preemption and by other threads' calls. Per thread, as CLOCK_THREAD_CPUTIME_ID is: a queue learns
/// from two reads taken on the thread that ran a step, and a shared counter would charge that step
/// with whatever other threads' calls cost meanwhile, so the model would depend on how the worker's
/// and the draining thread's calls interleave. reset() zeroes every thread's clock, threads that keep
/// running across it included.
struct cpu_clock {
    static std::chrono::nanoseconds now() noexcept { return std::chrono::nanoseconds{mine().ticks}; }
    static void advance(std::chrono::nanoseconds d) noexcept { mine().ticks += d.count(); }
    static void reset() noexcept { generation().fetch_add(1, std::memory_order_relaxed); }

private:
    struct thread_ticks {
        std::uint64_t generation = 0;
        std::int64_t ticks = 0;
    };

    // reset() cannot reach other threads' thread_locals, so each thread drops its ticks when it sees
    // that a reset came after it last looked. Relaxed suffices: a thread that is ordered after a
    // reset() (by a join, a lock, the start of a thread) reads that generation or a later one.
    static thread_ticks& mine() noexcept {
        thread_local thread_ticks state;
        const std::uint64_t current = generation().load(std::memory_order_relaxed);
        if (state.generation != current) state = {current, 0};
        return state;
    }

    static std::atomic<std::uint64_t>& generation() noexcept {
        static std::atomic<std::uint64_t> value{0};
        return value;
    }
};

/// One call scripted_os received.
struct os_call {
    enum class kind { map, unmap, close, pause };
    kind op = kind::close;
    void* addr = nullptr;
    std::size_t length = 0;
    int fd = -1;
    int result = 0;                 ///< errno returned (0: success)
    std::thread::id thread{};       ///< who made the call
    std::chrono::nanoseconds slept{0};  ///< a pause: how long it asked to sleep
};

/// The state behind scripted_os. Costs and failures are plain fields a test sets before running.
class os_script {
public:
    /// Scripted cost per call, applied to manual_clock and to the calling thread's cpu_clock:
    /// overhead + rate * bytes. For close, the bytes are those given to open_fd().
    std::chrono::nanoseconds call_overhead{0};
    double unmap_ns_per_byte = 0.0;
    double close_ns_per_byte = 0.0;
    /// Replaces the linear cost when set.
    std::function<std::chrono::nanoseconds(const os_call&)> cost;
    /// Wall time each call takes on top of its cost without using CPU time, as if the thread were
    /// preempted inside it: manual_clock advances by cost + preempt, the caller's cpu_clock by the
    /// cost alone.
    std::chrono::nanoseconds preempt{0};
    /// Wall time each pause takes on top of what it asked, as timer slack and wake-up add; negative,
    /// a sleep a signal cut short (a pause never takes less than zero).
    std::chrono::nanoseconds pause_overshoot{0};
    /// Called with each pause as it is recorded, as `cost` is for the other calls, so a test that logs
    /// calls from `cost` sees the pauses in order with them. Runs on the sleeping thread under the
    /// script's (recursive) lock, before manual_clock moves: it may call script() but must not wait for
    /// another thread's scripted call, and must not throw.
    std::function<void(const os_call&)> on_pause;
    /// Returns an errno to make the call fail, 0 to let it succeed. A failed unmap changes nothing; a
    /// failed close still releases the descriptor (Linux semantics), except for EBADF on a closed one.
    std::function<int(const os_call&)> fail;

    /// A fresh descriptor, lowest free number from 100 up, standing for a memfd of `bytes`.
    int open_fd(std::size_t bytes = 0) {
        std::lock_guard lock(mutex_);
        int fd = 100;
        while (open_.contains(fd)) ++fd;
        open_[fd] = bytes;
        return fd;
    }

    /// A fresh page-aligned fake range of `bytes` (never dereference it).
    void* map_range(std::size_t bytes) {
        std::lock_guard lock(mutex_);
        return map_locked(bytes);
    }

    [[nodiscard]] std::vector<os_call> calls() const {
        std::lock_guard lock(mutex_);
        return calls_;
    }
    [[nodiscard]] std::size_t count(os_call::kind op) const {
        std::lock_guard lock(mutex_);
        return static_cast<std::size_t>(std::count_if(calls_.begin(), calls_.end(), [op](const os_call& c) { return c.op == op; }));
    }
    [[nodiscard]] std::size_t open_fds() const {
        std::lock_guard lock(mutex_);
        return open_.size();
    }
    [[nodiscard]] bool is_open(int fd) const {
        std::lock_guard lock(mutex_);
        return open_.contains(fd);
    }
    /// What open_fd() said the descriptor holds, or -1 when it is not open (as fstat's EBADF).
    /// Not recorded as a call, and costs nothing: fstat frees nothing.
    [[nodiscard]] std::int64_t bytes_of(int fd) const {
        std::lock_guard lock(mutex_);
        const auto it = open_.find(fd);
        return it == open_.end() ? -1 : static_cast<std::int64_t>(it->second);
    }
    /// Bytes of fake ranges still mapped.
    [[nodiscard]] std::size_t mapped_bytes() const {
        std::lock_guard lock(mutex_);
        std::size_t total = 0;
        for (const auto& [start, end] : mapped_) total += end - start;
        return total;
    }
    /// Calls that would be bugs on a real kernel: closing a descriptor not open, unmapping bytes
    /// not mapped (the kernel would silently succeed at the latter; the script counts it).
    [[nodiscard]] std::size_t misuse() const {
        std::lock_guard lock(mutex_);
        return misuse_;
    }

    void clear() {
        std::lock_guard lock(mutex_);
        call_overhead = std::chrono::nanoseconds{0};
        unmap_ns_per_byte = close_ns_per_byte = 0.0;
        cost = nullptr;
        preempt = std::chrono::nanoseconds{0};
        pause_overshoot = std::chrono::nanoseconds{0};
        on_pause = nullptr;
        fail = nullptr;
        calls_.clear();
        open_.clear();
        mapped_.clear();
        next_addr_ = base_addr;
        misuse_ = 0;
    }

    // ---- called by scripted_os ----

    void* do_map(std::size_t length, int fd, int& error) noexcept {
        std::lock_guard lock(mutex_);
        os_call call{os_call::kind::map, nullptr, length, fd, 0, std::this_thread::get_id()};
        call.result = open_.contains(fd) ? 0 : EBADF;
        if (call.result == 0 && fail) call.result = fail(call);
        if (call.result == 0) call.addr = map_locked(length);
        finish(call);
        error = call.result;
        return call.result == 0 ? call.addr : MAP_FAILED;
    }

    int do_unmap(void* addr, std::size_t length) noexcept {
        std::lock_guard lock(mutex_);
        os_call call{os_call::kind::unmap, addr, length, -1, 0, std::this_thread::get_id()};
        if (addr == nullptr || !detail::is_page_aligned(addr) || length == 0) call.result = EINVAL;
        if (call.result == 0 && fail) call.result = fail(call);
        if (call.result == 0) unmap_locked(reinterpret_cast<std::uintptr_t>(addr), detail::round_up_to_page(length));
        finish(call);
        return call.result;
    }

    int do_close(int fd) noexcept {
        std::lock_guard lock(mutex_);
        os_call call{os_call::kind::close, nullptr, 0, fd, 0, std::this_thread::get_id()};
        const auto it = open_.find(fd);
        if (it == open_.end()) {
            ++misuse_;
            call.result = EBADF;
        } else {
            call.length = it->second;
            if (fail) call.result = fail(call);
            open_.erase(it);
        }
        finish(call);
        return call.result;
    }

    /// A sleep: manual_clock advances by `d` + pause_overshoot (at least zero, saturating), cpu_clock
    /// not at all. Scripted costs do not apply.
    void do_pause(std::chrono::nanoseconds d) noexcept {
        std::lock_guard lock(mutex_);
        os_call call{os_call::kind::pause, nullptr, 0, -1, 0, std::this_thread::get_id(), d};
        calls_.push_back(call);
        if (on_pause) on_pause(call);
        constexpr auto longest = std::chrono::nanoseconds::max();
        const bool overflows = pause_overshoot > std::chrono::nanoseconds::zero() && d > longest - pause_overshoot;
        manual_clock::advance(overflows ? longest : std::max(d + pause_overshoot, std::chrono::nanoseconds::zero()));
    }

private:
    static constexpr std::uintptr_t base_addr = std::uintptr_t{1} << 40;

    void* map_locked(std::size_t bytes) {
        const std::uintptr_t start = next_addr_;
        const std::uintptr_t end = start + detail::round_up_to_page(bytes);
        next_addr_ = end + detail::page_size();  // a guard gap, so neighbours never merge
        mapped_[start] = end;
        return reinterpret_cast<void*>(start);
    }

    // Removes [start, end) from the mapped set, splitting ranges as munmap splits VMAs.
    void unmap_locked(std::uintptr_t start, std::size_t length) {
        const std::uintptr_t end = start + length;
        std::size_t covered = 0;
        auto it = mapped_.upper_bound(start);
        if (it != mapped_.begin()) --it;
        while (it != mapped_.end() && it->first < end) {
            const auto [lo, hi] = *it;
            it = mapped_.erase(it);
            if (hi <= start) continue;
            covered += std::min(hi, end) - std::max(lo, start);
            if (lo < start) mapped_[lo] = start;
            if (hi > end) mapped_[end] = hi;
        }
        if (covered != length) ++misuse_;
    }

    void finish(const os_call& call) {
        calls_.push_back(call);
        const std::chrono::nanoseconds used = cost ? cost(call) : linear_cost(call);
        cpu_clock::advance(used);
        manual_clock::advance(used + preempt);
    }

    [[nodiscard]] std::chrono::nanoseconds linear_cost(const os_call& call) const noexcept {
        const double rate = call.op == os_call::kind::unmap   ? unmap_ns_per_byte
                            : call.op == os_call::kind::close ? close_ns_per_byte
                                                              : 0.0;
        return call_overhead + std::chrono::nanoseconds{static_cast<std::int64_t>(rate * static_cast<double>(call.length))};
    }

    mutable std::recursive_mutex mutex_;
    std::vector<os_call> calls_;
    std::map<int, std::size_t> open_;
    std::map<std::uintptr_t, std::uintptr_t> mapped_;  // start -> end
    std::uintptr_t next_addr_ = base_addr;
    std::size_t misuse_ = 0;
};

/// The process-global script behind scripted_os.
inline os_script& script() noexcept {
    static os_script instance;
    return instance;
}

/// An Os policy that runs on script(). Thread-safe.
struct scripted_os {
    static void* map(void*, std::size_t length, int, int, int fd, off_t, int& error) noexcept {
        return script().do_map(length, fd, error);
    }
    static int unmap(void* addr, std::size_t length) noexcept { return script().do_unmap(addr, length); }
    static int close(int fd) noexcept { return script().do_close(fd); }
    static std::chrono::nanoseconds thread_cpu_time() noexcept { return cpu_clock::now(); }
    static std::int64_t allocated_bytes(int fd) noexcept { return script().bytes_of(fd); }
    static void pause(std::chrono::nanoseconds d) noexcept { script().do_pause(d); }
};

static_assert(os_policy<scripted_os>, "scripted_os must model os_policy");
static_assert(has_thread_cpu_time<scripted_os>, "scripted_os scripts a CPU clock");
static_assert(has_pause<scripted_os>, "scripted_os scripts sleeps");
static_assert(has_allocated_bytes<scripted_os>, "scripted_os sizes its descriptors");

using scripted_fd = basic_unique_fd<scripted_os>;
using scripted_mapping = basic_mapping<scripted_os>;
using scripted_region = basic_shm_region<scripted_os>;

/// Clears the script and sets manual_clock to 1 s (so time_point{} is safely in the past).
inline os_script& reset() {
    script().clear();
    cpu_clock::reset();
    manual_clock::set(manual_clock::time_point{std::chrono::seconds{1}});
    return script();
}

/// While alive, every growth of a queue's rings fails as an exhausted heap would (the allocation seam);
/// reserved room is still used. One at a time; process-global.
class allocation_failure {
public:
    allocation_failure() noexcept { detail::allocation_gate.store(&refuse, std::memory_order_relaxed); }
    ~allocation_failure() { detail::allocation_gate.store(nullptr, std::memory_order_relaxed); }
    allocation_failure(const allocation_failure&) = delete;
    allocation_failure& operator=(const allocation_failure&) = delete;

private:
    static bool refuse(std::size_t) noexcept { return false; }
};

/// While alive, every worker thread a queue would start fails to start, as at a thread limit (EAGAIN):
/// the thread-creation seam, for a host's own "no thread" path. One at a time; process-global.
class thread_creation_failure {
public:
    thread_creation_failure() noexcept { detail::thread_creation_gate.store(&refuse, std::memory_order_relaxed); }
    ~thread_creation_failure() { detail::thread_creation_gate.store(nullptr, std::memory_order_relaxed); }
    thread_creation_failure(const thread_creation_failure&) = delete;
    thread_creation_failure& operator=(const thread_creation_failure&) = delete;

private:
    static int refuse() noexcept { return EAGAIN; }
};

/// A fake pool of `bytes`: a scripted descriptor and a scripted mapping of it.
inline scripted_region make_region(std::size_t bytes) {
    const int fd = script().open_fd(bytes);
    std::error_code ec;
    scripted_mapping map = scripted_mapping::map(fd, bytes, PROT_READ, MAP_SHARED, 0, ec);
    return scripted_region{scripted_fd{fd}, std::move(map)};
}

}  // namespace deferred_unmap::testing

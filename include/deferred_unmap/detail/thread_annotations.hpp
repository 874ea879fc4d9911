// deferred_unmap/detail/thread_annotations.hpp - locking rules clang checks (-Wthread-safety).
//
// The macros follow absl/base/thread_annotations.h; they expand to nothing for other compilers. The
// standard library's mutexes carry no annotations, so the queue locks through the wrappers below.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>

#if defined(__clang__)
#define DU_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DU_THREAD_ANNOTATION(x)
#endif

#define DU_CAPABILITY(x) DU_THREAD_ANNOTATION(capability(x))
#define DU_SCOPED_CAPABILITY DU_THREAD_ANNOTATION(scoped_lockable)
#define DU_GUARDED_BY(x) DU_THREAD_ANNOTATION(guarded_by(x))
#define DU_REQUIRES(...) DU_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define DU_EXCLUDES(...) DU_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define DU_ACQUIRE(...) DU_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define DU_RELEASE(...) DU_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define DU_TRY_ACQUIRE(...) DU_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define DU_NO_THREAD_SAFETY_ANALYSIS DU_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace deferred_unmap::detail {

/// std::mutex as a capability. BasicLockable, so std::condition_variable_any can wait on it.
class DU_CAPABILITY("mutex") mutex {
public:
    void lock() DU_ACQUIRE() { m_.lock(); }
    void unlock() DU_RELEASE() { m_.unlock(); }
    /// Waits on `cv` with this mutex held, as std::condition_variable::wait does with a unique_lock.
    /// A plain condition_variable, not _any: renewing one after fork() allocates and leaks nothing.
    template <class Predicate>
    void wait(std::condition_variable& cv, Predicate ready) DU_REQUIRES(this) {
        std::unique_lock held(m_, std::adopt_lock);
        cv.wait(held, ready);
        held.release();
    }
    /// As wait(), for at most `timeout` of real time; the predicate's last value.
    template <class Predicate>
    bool wait_for(std::condition_variable& cv, std::chrono::nanoseconds timeout, Predicate ready) DU_REQUIRES(this) {
        std::unique_lock held(m_, std::adopt_lock);
        const bool result = cv.wait_for(held, timeout, ready);
        held.release();
        return result;
    }
    /// In the child of a fork(), whose only thread is the one that forked: an unlocked mutex, whatever
    /// the parent's threads held. The old one is not destroyed (nothing of it is left to release).
    void renew_after_fork() DU_NO_THREAD_SAFETY_ANALYSIS { new (&m_) std::mutex; }

private:
    std::mutex m_;
};

/// A lock whose waiters give up after a timeout: the step lock, which a drain waits for at most its
/// budget. Built from std::mutex and std::condition_variable rather than std::timed_mutex, whose
/// timed wait (pthread_mutex_clocklock) ThreadSanitizer cannot see, so hosts' TSan builds stay quiet.
class DU_CAPABILITY("mutex") timed_mutex {
public:
    void lock() DU_ACQUIRE() {
        std::unique_lock guard(m_);
        free_.wait(guard, [this] { return !held_; });
        held_ = true;
    }
    void unlock() DU_RELEASE() {
        {
            const std::lock_guard guard(m_);
            held_ = false;
        }
        free_.notify_one();
    }
    /// Waits at most `timeout` of real (steady) time; a timeout <= 0 only tries.
    bool try_lock_for(std::chrono::nanoseconds timeout) DU_TRY_ACQUIRE(true) {
        std::unique_lock guard(m_);
        if (!free_.wait_for(guard, std::max(timeout, std::chrono::nanoseconds::zero()), [this] { return !held_; }))
            return false;
        held_ = true;
        return true;
    }
    /// As mutex::renew_after_fork(): free, with no waiter, in the child of a fork().
    void renew_after_fork() DU_NO_THREAD_SAFETY_ANALYSIS {
        new (&m_) std::mutex;
        new (&free_) std::condition_variable;
        held_ = false;
    }

private:
    std::mutex m_;
    std::condition_variable free_;
    bool held_ = false;
};

/// std::lock_guard for the wrappers above.
template <class Mutex>
class DU_SCOPED_CAPABILITY lock_guard {
public:
    explicit lock_guard(Mutex& m) DU_ACQUIRE(m) : m_(m) { m_.lock(); }
    /// Adopts a lock the caller already holds.
    lock_guard(Mutex& m, std::adopt_lock_t) DU_REQUIRES(m) : m_(m) {}
    ~lock_guard() DU_RELEASE() { m_.unlock(); }
    lock_guard(const lock_guard&) = delete;
    lock_guard& operator=(const lock_guard&) = delete;

private:
    Mutex& m_;
};

}  // namespace deferred_unmap::detail

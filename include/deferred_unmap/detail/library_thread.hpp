// deferred_unmap/detail/library_thread.hpp - a thread that behaves inside someone else's process.
//
// A host reads its signals its own way (wl_event_loop_add_signal blocks them and reads a signalfd;
// Qt and GLib install handlers): a library thread that left them unblocked would be picked by the
// kernel to take them, and with the default action the process dies. So the thread starts with every
// asynchronous signal blocked (synchronous ones stay deliverable, as a fault must still be reported),
// is named for top -H and perf, runs SCHED_OTHER whatever the creating thread's policy (a compositor's
// frame thread may be SCHED_RR or SCHED_FIFO; a library thread must not compete with it at that
// priority), and may lower its own priority when it takes no mmap_lock. Creation reports an errno
// instead of throwing: a host built with -fno-exceptions (KWin) must be able to go on without it.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>

namespace deferred_unmap::detail {

/// The test seam for thread creation: when set, start() asks it first and fails with the errno it
/// returns (0: go on). testing::thread_creation_failure sets it.
inline std::atomic<int (*)() noexcept> thread_creation_gate{nullptr};

/// Blocks every asynchronous signal in the calling thread for its lifetime, then restores the mask.
class async_signals_blocked {
public:
    async_signals_blocked() noexcept {
        sigset_t all;
        ::sigfillset(&all);
        for (const int sync : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) ::sigdelset(&all, sync);
        ::pthread_sigmask(SIG_SETMASK, &all, &saved_);
    }
    ~async_signals_blocked() { ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
    async_signals_blocked(const async_signals_blocked&) = delete;
    async_signals_blocked& operator=(const async_signals_blocked&) = delete;

private:
    sigset_t saved_{};
};

/// The nice value a close-only worker takes with low_priority_closes: far below the frame thread, but
/// not SCHED_IDLE, which can leave it unscheduled for a second while it holds one of the queue's short
/// locks (a push or a drain would wait behind it).
inline constexpr int low_priority_nice = 10;

/// Lowers the calling thread's priority to `nice` (Linux: per thread). Best effort; true when it took.
inline bool lower_this_thread_priority(int nice) noexcept {
#if defined(__linux__)
    return ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice) == 0;
#else
    (void)nice;
    return false;
#endif
}

/// A joinable POSIX thread, created SCHED_OTHER with asynchronous signals blocked and named. Move-only
/// in spirit (not copyable, not movable: its owner holds it in place). The destructor joins.
class library_thread {
public:
    using entry = void (*)(void* context) noexcept;

    library_thread() noexcept = default;
    library_thread(const library_thread&) = delete;
    library_thread& operator=(const library_thread&) = delete;
    ~library_thread() { join(); }

    /// Runs `run(context)` on a new thread named `name` (at most 15 characters show). 0, or the errno
    /// that kept it from starting (EAGAIN: no thread could be made; then nothing runs). The caller's
    /// signal mask is unchanged afterwards. Cost: one pthread_create; allocates the thread's stack.
    [[nodiscard]] int start(const char* name, entry run, void* context) noexcept {
        if (const auto gate = thread_creation_gate.load(std::memory_order_relaxed); gate != nullptr) {
            if (const int refused = gate(); refused != 0) return refused;
        }
        trampoline_ = {run, context};
        pthread_attr_t attr;
        if (const int error = ::pthread_attr_init(&attr); error != 0) return error;
        int error = guest_scheduling(attr);
        if (error == 0) {
            const async_signals_blocked blocked;  // the new thread inherits this mask
            error = ::pthread_create(&handle_, &attr, &library_thread::body, &trampoline_);
        }
        ::pthread_attr_destroy(&attr);
        if (error != 0) return error;
        joinable_ = true;
        name_thread(name);
        return 0;
    }

    [[nodiscard]] bool joinable() const noexcept { return joinable_; }

    /// Waits for the thread to return. No-op when it never started or was forgotten.
    void join() noexcept {
        if (!joinable_) return;
        ::pthread_join(handle_, nullptr);
        joinable_ = false;
    }

    /// In the child of a fork(): the thread does not exist there, so it must never be joined (its
    /// exit would never be seen). Its stack, a copy in the child's memory, stays allocated.
    void forget_after_fork() noexcept { joinable_ = false; }

private:
    struct call {
        entry run = nullptr;
        void* context = nullptr;
    };

    static void* body(void* raw) noexcept {
        const call* c = static_cast<const call*>(raw);
        c->run(c->context);
        return nullptr;
    }

    // SCHED_OTHER at priority 0, set explicitly: by default a thread inherits its creator's policy, and
    // a worker made from a SCHED_RR thread would run real-time (where nice values mean nothing).
    static int guest_scheduling(pthread_attr_t& attr) noexcept {
        const sched_param normal{};
        if (const int error = ::pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED); error != 0) return error;
        if (const int error = ::pthread_attr_setschedpolicy(&attr, SCHED_OTHER); error != 0) return error;
        return ::pthread_attr_setschedparam(&attr, &normal);
    }

    // Named by the creator, so the name holds before the caller goes on. Best effort.
    void name_thread(const char* name) noexcept {
#if defined(__linux__)
        ::pthread_setname_np(handle_, name);
#else
        (void)name;
#endif
    }

    pthread_t handle_{};
    call trampoline_{};
    bool joinable_ = false;
};

}  // namespace deferred_unmap::detail

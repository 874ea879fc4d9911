// deferred_unmap/detail/library_thread.hpp - a thread that behaves inside someone else's process.
//
// A host reads its signals its own way (wl_event_loop_add_signal blocks them and reads a signalfd;
// Qt and GLib install handlers): a library thread that left them unblocked would be picked by the
// kernel to take them, and with the default action the process dies. So the thread starts with every
// asynchronous signal blocked (synchronous ones stay deliverable, as a fault must still be reported),
// is named for top -H and perf, and may lower its own priority when it takes no mmap_lock.
#pragma once

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <thread>
#include <utility>

namespace deferred_unmap::detail {

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

/// Names `thread` (at most 15 characters show). Best effort: a failure changes nothing.
inline void name_thread(std::jthread& thread, const char* name) noexcept {
#if defined(__linux__)
    ::pthread_setname_np(thread.native_handle(), name);
#else
    (void)thread;
    (void)name;
#endif
}

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

/// Starts `body` on a new thread named `name` that inherits a mask with every asynchronous signal
/// blocked; the caller's own mask is unchanged afterwards, even when creation throws std::system_error.
/// Named by the creator, so the name holds before the caller goes on.
template <class Body>
std::jthread start_library_thread(const char* name, Body&& body) {
    std::jthread thread = [&] {
        const async_signals_blocked blocked;
        return std::jthread(std::forward<Body>(body));
    }();
    name_thread(thread, name);
    return thread;
}

}  // namespace deferred_unmap::detail

// deferred_unmap/detail/worker.hpp - the queue's worker thread: closes handed to it, or every step.
//
// Started by library_thread (async signals blocked, named du-reclaim). It tells the host when it has
// run out of work through a descriptor that becomes readable, which fits wl_event_loop_add_fd,
// QSocketNotifier and g_unix_fd_add, and through a wait with a timeout.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <stop_token>
#include <system_error>
#include <thread>

#include "../reclaim_options.hpp"
#include "../unique_fd.hpp"
#include "backlog.hpp"
#include "library_thread.hpp"
#include "ring.hpp"
#include "step_engine.hpp"
#include "thread_annotations.hpp"

namespace deferred_unmap::detail {

template <class Clock, class Os>
class worker {
public:
    worker(backlog<Clock>& books, step_engine<Clock, Os>& engine, const reclaim_options& options) noexcept
        : books_(books), engine_(engine), options_(options) {}

    worker(const worker&) = delete;
    worker& operator=(const worker&) = delete;
    worker(worker&&) = delete;
    worker& operator=(worker&&) = delete;
    ~worker() = default;

    /// Reserves the close ring, opens the done descriptor, starts the thread. Throws std::bad_alloc or
    /// std::system_error; without exceptions a failure leaves done_fd() at -1 or no room reserved.
    void start() DU_EXCLUDES(mutex_) {
        {
            lock_guard lock(mutex_);
            if (!closes_.reserve(options_.initial_capacity)) throw_bad_alloc();
        }
        std::array<int, 2> ends{-1, -1};
        if (::pipe2(ends.data(), O_CLOEXEC | O_NONBLOCK) != 0) throw_system_error(errno, "pipe2");
        done_read_ = unique_fd{ends[0]};
        done_write_ = unique_fd{ends[1]};
        thread_ = start_library_thread("du-reclaim", [this](std::stop_token stop) { main(stop); });
    }

    /// Takes a close; the caller wakes the worker with wake() once it is done handing off. O(1);
    /// allocates only when the ring is full; false when it cannot grow (the caller closes it itself).
    bool hand_off(int fd, std::size_t bytes) DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        return closes_.push_back({fd, bytes});
    }

    void wake() DU_EXCLUDES(mutex_) {
        { lock_guard lock(mutex_); }  // a worker between its check and its wait sees the new work
        cv_.notify_one();
    }

    /// Waits until the worker holds nothing; cuts its pause between chunks short.
    void wait_idle() DU_EXCLUDES(mutex_) { (void)wait_idle_for(std::chrono::nanoseconds::max()); }

    /// As wait_idle(), for at most `timeout` of real time. True when the worker holds nothing.
    bool wait_idle_for(std::chrono::nanoseconds timeout) DU_EXCLUDES(mutex_) {
        mutex_.lock();
        ++waiters_;
        cv_.notify_one();
        const auto idle = [this]() DU_REQUIRES(mutex_) { return idle_locked(); };
        const bool done = timeout == std::chrono::nanoseconds::max() ? (idle_cv_.wait(mutex_, idle), true)
                                                                     : idle_cv_.wait_for(mutex_, timeout, idle);
        --waiters_;
        mutex_.unlock();
        return done;
    }

    [[nodiscard]] int done_fd() const noexcept { return done_read_.get(); }

    /// Empties the done descriptor, so it is readable again only after the worker next runs out of work.
    void clear_done() DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        std::array<char, 64> sink{};
        while (done_read_ && ::read(done_read_.get(), sink.data(), sink.size()) > 0) {}
        signalled_ = false;
    }

private:
    struct close_job {
        int fd;
        std::size_t bytes;
    };

    static void throw_bad_alloc() {
#if DEFERRED_UNMAP_HAS_EXCEPTIONS
        throw std::bad_alloc();
#endif
    }
    static void throw_system_error([[maybe_unused]] int error, [[maybe_unused]] const char* what) {
#if DEFERRED_UNMAP_HAS_EXCEPTIONS
        throw std::system_error(error, std::system_category(), what);
#endif
    }

    [[nodiscard]] bool has_work() const DU_REQUIRES(mutex_) { return !closes_.empty() || books_.handed_over(); }
    [[nodiscard]] bool idle_locked() const DU_REQUIRES(mutex_) { return !busy_ && !has_work(); }

    void main(std::stop_token stop) noexcept DU_EXCLUDES(mutex_) {
        // A close-only worker takes no mmap_lock: however late it runs, no mmap() of the host waits on it.
        if (options_.low_priority_closes && !options_.unmap_on_worker) lower_this_thread_priority(low_priority_nice);
        mutex_.lock();
        for (;;) {
            if (idle_locked()) announce_idle();
            if (!cv_.wait(mutex_, stop, [this]() DU_REQUIRES(mutex_) { return has_work(); })) break;
            busy_ = true;
            if (!closes_.empty()) {
                const close_job job = closes_.pop_front();
                mutex_.unlock();
                close(job);
                mutex_.lock();
                busy_ = false;
                worked_ = true;
                continue;
            }
            mutex_.unlock();
            const bool more = engine_.step_once();
            mutex_.lock();
            busy_ = false;
            worked_ = worked_ || more;
            // The pause lets a waiting mmap() have the lock; a flush waiting on the worker cuts it short.
            if (more) cv_.wait_for(mutex_, stop, options_.worker_pause, [this]() DU_REQUIRES(mutex_) { return waiters_ > 0; });
        }
        mutex_.unlock();
    }

    void close(const close_job& job) noexcept {
        const auto before = Clock::now();
        const unsigned errors = close_once<Os>(job.fd, options_.on_error);
        const auto after = Clock::now();
        books_.record_worker_close(elapsed<Clock>(before, after), errors, after);
    }

    void announce_idle() DU_REQUIRES(mutex_) {
        idle_cv_.notify_all();
        if (!worked_ || signalled_ || !done_write_) return;
        worked_ = false;
        signalled_ = true;
        const char one = 1;
        (void)::write(done_write_.get(), &one, 1);  // a full pipe is readable already
    }

    backlog<Clock>& books_;
    step_engine<Clock, Os>& engine_;
    const reclaim_options& options_;

    mutex mutex_;
    std::condition_variable_any cv_;       // work arrived, a waiter arrived, or stop
    std::condition_variable_any idle_cv_;  // the worker ran out of work
    ring<close_job> closes_ DU_GUARDED_BY(mutex_);
    bool busy_ DU_GUARDED_BY(mutex_) = false;
    bool worked_ DU_GUARDED_BY(mutex_) = false;     // work done since the last announcement
    bool signalled_ DU_GUARDED_BY(mutex_) = false;  // a byte sits in the done pipe
    int waiters_ DU_GUARDED_BY(mutex_) = 0;
    unique_fd done_read_;
    unique_fd done_write_;
    std::jthread thread_;  // last: stopped and joined before anything it uses goes
};

}  // namespace deferred_unmap::detail

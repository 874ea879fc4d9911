// deferred_unmap/detail/worker.hpp - the queue's worker thread: closes handed to it, or every step.
//
// Started by library_thread (async signals blocked, SCHED_OTHER, named du-reclaim). It tells the host
// when it has run out of work through a descriptor that becomes readable, which fits
// wl_event_loop_add_fd, QSocketNotifier and g_unix_fd_add, and through a wait with a timeout. Where it
// cannot be started, and in the child of a fork(), running() is false: the queue then tears everything
// down inline.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <new>
#include <utility>

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
    ~worker() { stop(); }

    /// Reserves the close ring (best effort: it grows on demand), opens the done descriptor, starts the
    /// thread. 0, or the errno that kept the worker from starting (EMFILE or ENFILE: no pipe; EAGAIN: no
    /// thread); then nothing runs, running() stays false and the queue tears down inline. Never throws.
    [[nodiscard]] int start() noexcept DU_EXCLUDES(mutex_) {
        {
            lock_guard lock(mutex_);
            (void)closes_.reserve(options_.initial_capacity);
        }
        std::array<int, 2> ends{-1, -1};
        if (::pipe2(ends.data(), O_CLOEXEC | O_NONBLOCK) != 0) return errno;
        done_read_ = unique_fd{ends[0]};
        done_write_ = unique_fd{ends[1]};
        const auto run = [](void* self) noexcept { static_cast<worker*>(self)->main(); };
        if (const int error = thread_.start("du-reclaim", run, this); error != 0) {
            done_read_.reset();
            done_write_.reset();
            return error;
        }
        running_ = true;
        return 0;
    }

    /// The thread runs in this process: false before start(), after a failed one, and in the child of
    /// a fork(). Any thread; changes only in start() and in a fork's child.
    [[nodiscard]] bool running() const noexcept { return running_; }

    /// Takes a close; the caller wakes the worker with wake() once it is done handing off. O(1);
    /// allocates only when the ring is full; false when it cannot grow (the caller closes it itself).
    bool hand_off(int fd, std::size_t bytes) DU_EXCLUDES(mutex_) {
        if (!running_) {
            close_owed();
            return false;
        }
        lock_guard lock(mutex_);
        return closes_.push_back({fd, bytes});
    }

    void wake() DU_EXCLUDES(mutex_) {
        { lock_guard lock(mutex_); }  // a worker between its check and its wait sees the new work
        cv_.notify_one();
    }

    /// Waits until the worker holds nothing; cuts its pause between chunks short.
    void wait_idle() DU_EXCLUDES(mutex_) { (void)wait_idle_for(std::chrono::nanoseconds::max()); }

    /// As wait_idle(), for at most `timeout` of real time. True when the worker holds nothing. Without
    /// a running worker, true once the closes a fork left owed are made, on this thread.
    bool wait_idle_for(std::chrono::nanoseconds timeout) DU_EXCLUDES(mutex_) {
        if (!running_) {
            close_owed();
            return true;
        }
        mutex_.lock();
        ++waiters_;
        cv_.notify_one();
        const auto idle = [this]() DU_REQUIRES(mutex_) { return idle_locked(); };
        const bool done = timeout == std::chrono::nanoseconds::max() ? (mutex_.wait(idle_cv_, idle), true)
                                                                     : mutex_.wait_for(idle_cv_, timeout, idle);
        --waiters_;
        mutex_.unlock();
        return done;
    }

    /// Stops the thread once it is idle and waits for it; a queue flushes first. No-op when not running.
    void stop() noexcept DU_EXCLUDES(mutex_) {
        if (!running_) return;
        {
            lock_guard lock(mutex_);
            stopping_ = true;
        }
        cv_.notify_one();
        thread_.join();
        running_ = false;
    }

    // ---- fork(): see fork_guard.hpp. The queue takes this lock after its step lock, before the books'.

    void lock_for_fork() DU_ACQUIRE(mutex_) { mutex_.lock(); }
    void unlock_after_fork() DU_RELEASE(mutex_) { mutex_.unlock(); }

    /// In the child: the thread is gone. The closes still in its ring stay owed: made, oldest first, by
    /// the child's next hand-off, flush or wait (so before any close of its own), not in the fork
    /// handler, which a fork+exec would pay for nothing and where on_error must not run. A close the
    /// thread had begun is booked but not repeated, as it may have been made already and its number
    /// given to another descriptor. Allocates nothing.
    void renew_after_fork() DU_NO_THREAD_SAFETY_ANALYSIS {
        mutex_.renew_after_fork();
        new (&cv_) std::condition_variable;
        new (&idle_cv_) std::condition_variable;
        thread_.forget_after_fork();
        running_ = false;
        waiters_ = 0;
        const auto now = Clock::now();
        if (in_hand_) book({std::chrono::nanoseconds{0}, 0, now});
        in_hand_ = busy_ = false;
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

    [[nodiscard]] bool has_work() const DU_REQUIRES(mutex_) { return !closes_.empty() || books_.handed_over(); }
    [[nodiscard]] bool idle_locked() const DU_REQUIRES(mutex_) { return !busy_ && !has_work(); }

    void main() noexcept DU_EXCLUDES(mutex_) {
        // A close-only worker takes no mmap_lock: however late it runs, no mmap() of the host waits on it.
        if (options_.low_priority_closes && !options_.unmap_on_worker) lower_this_thread_priority(low_priority_nice);
        mutex_.lock();
        for (;;) {
            if (idle_locked()) announce_idle();
            mutex_.wait(cv_, [this]() DU_REQUIRES(mutex_) { return has_work() || stopping_; });
            if (stopping_) break;
            busy_ = true;
            if (!closes_.empty()) {
                const close_job job = closes_.pop_front();
                in_hand_ = true;
                mutex_.unlock();
                const closed done = close(job);
                mutex_.lock();
                // Booked under this lock, with in_hand_ cleared: a fork's child sees the close either
                // booked or in hand, never both (before_fork takes this lock, then the books').
                book(done);
                in_hand_ = busy_ = false;
                worked_ = true;
                continue;
            }
            mutex_.unlock();
            const bool more = engine_.step_once();
            mutex_.lock();
            busy_ = false;
            worked_ = worked_ || more;
            // The pause lets a waiting mmap() have the lock; a flush waiting on the worker cuts it short.
            if (more) mutex_.wait_for(cv_, options_.worker_pause, [this]() DU_REQUIRES(mutex_) { return waiters_ > 0 || stopping_; });
        }
        mutex_.unlock();
    }

    struct closed {
        std::chrono::nanoseconds took;
        unsigned errors;
        typename Clock::time_point when;
    };

    // The close(2) alone, outside every lock.
    closed close(const close_job& job) const noexcept {
        const auto before = Clock::now();
        const unsigned errors = close_once<Os>(job.fd, options_.on_error);
        const auto after = Clock::now();
        return {elapsed<Clock>(before, after), errors, after};
    }

    // Without a running worker (a fork's child): the ring's closes, made here, oldest first.
    void close_owed() DU_EXCLUDES(mutex_) {
        lock_guard lock(mutex_);
        while (!closes_.empty()) book(close(closes_.pop_front()));
    }

    void book(const closed& done) DU_REQUIRES(mutex_) { books_.record_worker_close(done.took, done.errors, done.when); }

    void announce_idle() DU_REQUIRES(mutex_) {
        idle_cv_.notify_all();
        if (!worked_ || signalled_ || !done_write_) return;
        worked_ = false;
        signalled_ = true;
        const char one = 1;
        // A full pipe is readable already, so a failed write loses nothing. Tested rather than cast to
        // void: glibc's fortified write() warns about an ignored result even then.
        if (::write(done_write_.get(), &one, 1) < 0) return;
    }

    backlog<Clock>& books_;
    step_engine<Clock, Os>& engine_;
    const reclaim_options& options_;

    mutex mutex_;
    std::condition_variable cv_;       // work arrived, a waiter arrived, or stop
    std::condition_variable idle_cv_;  // the worker ran out of work
    ring<close_job> closes_ DU_GUARDED_BY(mutex_);
    bool busy_ DU_GUARDED_BY(mutex_) = false;
    bool in_hand_ DU_GUARDED_BY(mutex_) = false;    // busy_ with a close popped from closes_
    bool stopping_ DU_GUARDED_BY(mutex_) = false;
    bool worked_ DU_GUARDED_BY(mutex_) = false;     // work done since the last announcement
    bool signalled_ DU_GUARDED_BY(mutex_) = false;  // a byte sits in the done pipe
    int waiters_ DU_GUARDED_BY(mutex_) = 0;
    unique_fd done_read_;
    unique_fd done_write_;
    bool running_ = false;  // written only before the thread exists, in stop() and in a fork's child
    library_thread thread_;  // last: joined (by stop()) before anything it uses goes
};

}  // namespace deferred_unmap::detail

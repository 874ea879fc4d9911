// deferred_unmap/detail/fork_guard.hpp - what every queue does around fork().
//
// The child of a fork() has one thread, the one that forked: a queue's worker is not there, and a
// lock another thread held at that moment would stay held for ever, so the child would hang in its
// first drain or in the queue's destructor at exit(). Every queue therefore enrolls here. Before a
// fork the forking thread takes each queue's locks, in the queue's own lock order, so the child's
// copy is consistent; after it the parent releases them, and the child renews its locks and forgets
// its worker, so its queue goes on inline. Forking from a queue's on_error callback deadlocks (that
// thread already holds the step lock), as does any call back into the queue from there.
#pragma once

#include <pthread.h>

#include <mutex>
#include <new>

#include "thread_annotations.hpp"

namespace deferred_unmap::detail {

/// Something with locks that must be consistent in a child of fork(). The three hooks run with the
/// registry's lock held, in the forking thread (the child's only thread for the last one).
class fork_participant {
public:
    /// Takes every lock of this object; a lock held by another thread is waited for.
    virtual void before_fork() noexcept = 0;
    /// Releases what before_fork() took.
    virtual void after_fork_in_parent() noexcept = 0;
    /// Renews every lock and drops what belonged to threads that the child does not have.
    virtual void after_fork_in_child() noexcept = 0;

    fork_participant(const fork_participant&) = delete;
    fork_participant& operator=(const fork_participant&) = delete;

protected:
    fork_participant() noexcept = default;
    ~fork_participant() = default;

private:
    friend class fork_registry;
    fork_participant* prev_ = nullptr;
    fork_participant* next_ = nullptr;
};

/// The process's participants and the one pthread_atfork registration that serves them all.
class fork_registry {
public:
    /// Adds `p`. O(1); registers the fork handlers on first use (where pthread_atfork fails, for lack
    /// of memory, the next enroll tries again). Blocks while a fork is under way.
    static void enroll(fork_participant& p) noexcept {
        state& s = get();
        const std::lock_guard lock(s.mutex);
        if (!s.handlers_installed) s.handlers_installed = ::pthread_atfork(&prepare, &parent, &child) == 0;
        p.prev_ = nullptr;
        p.next_ = s.head;
        if (s.head != nullptr) s.head->prev_ = &p;
        s.head = &p;
    }

    /// Removes `p`, which must be enrolled. O(1). Blocks while a fork is under way.
    static void leave(fork_participant& p) noexcept {
        state& s = get();
        const std::lock_guard lock(s.mutex);
        (p.prev_ != nullptr ? p.prev_->next_ : s.head) = p.next_;
        if (p.next_ != nullptr) p.next_->prev_ = p.prev_;
        p.prev_ = p.next_ = nullptr;
    }

private:
    struct state {
        std::mutex mutex;
        fork_participant* head = nullptr;
        bool handlers_installed = false;
    };

    // Never destroyed, and not allocated: a queue with static storage may be destroyed after any other
    // static, and enrolling must not fail.
    static state& get() noexcept {
        alignas(state) static unsigned char storage[sizeof(state)];
        static state* const instance = new (storage) state;
        return *instance;
    }

    // The registry's lock is held from prepare() to parent() or child(), across the fork itself.
    static void prepare() noexcept DU_NO_THREAD_SAFETY_ANALYSIS {
        state& s = get();
        s.mutex.lock();
        for (fork_participant* p = s.head; p != nullptr; p = p->next_) p->before_fork();
    }
    static void parent() noexcept DU_NO_THREAD_SAFETY_ANALYSIS {
        state& s = get();
        for (fork_participant* p = s.head; p != nullptr; p = p->next_) p->after_fork_in_parent();
        s.mutex.unlock();
    }
    static void child() noexcept DU_NO_THREAD_SAFETY_ANALYSIS {
        state& s = get();
        for (fork_participant* p = s.head; p != nullptr; p = p->next_) p->after_fork_in_child();
        s.mutex.unlock();
    }
};

}  // namespace deferred_unmap::detail

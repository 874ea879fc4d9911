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

#include <type_traits>

namespace deferred_unmap::detail {

/// Something with locks that must be consistent in a child of fork(): three hooks on one object, run
/// with the registry's lock held, in the forking thread (the child's only thread for the last).
/// Function pointers, not virtuals, so a queue holds one as a plain member.
class fork_participant {
public:
    using hook = void (*)(void* self) noexcept;

    /// `before` takes every lock of `self` (a lock held by another thread is waited for); `in_parent`
    /// releases them; `in_child` renews them and drops what belonged to threads the child lacks.
    fork_participant(void* self, hook before, hook in_parent, hook in_child) noexcept
        : self_(self), before_(before), in_parent_(in_parent), in_child_(in_child) {}
    fork_participant(const fork_participant&) = delete;
    fork_participant& operator=(const fork_participant&) = delete;
    ~fork_participant() = default;

private:
    friend class fork_registry;
    void* self_;
    hook before_;
    hook in_parent_;
    hook in_child_;
    fork_participant* prev_ = nullptr;
    fork_participant* next_ = nullptr;
};

// The registry's state. Constant-initialized and trivially destructible: a queue with static storage
// may be made before, and destroyed after, any other static.
struct fork_registry_state {
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    fork_participant* head = nullptr;
    bool handlers_installed = false;
};
static_assert(std::is_trivially_destructible_v<fork_registry_state>);
inline constinit fork_registry_state fork_state{};

/// The process's participants and the one pthread_atfork registration that serves them all.
class fork_registry {
public:
    /// Adds `p`. O(1); registers the fork handlers on first use (where pthread_atfork fails, for lack
    /// of memory, the next enroll tries again). Blocks while a fork is under way.
    static void enroll(fork_participant& p) noexcept {
        ::pthread_mutex_lock(&fork_state.mutex);
        if (!fork_state.handlers_installed) fork_state.handlers_installed = ::pthread_atfork(&prepare, &parent, &child) == 0;
        p.prev_ = nullptr;
        p.next_ = fork_state.head;
        if (fork_state.head != nullptr) fork_state.head->prev_ = &p;
        fork_state.head = &p;
        ::pthread_mutex_unlock(&fork_state.mutex);
    }

    /// Removes `p`, which must be enrolled. O(1). Blocks while a fork is under way.
    static void leave(fork_participant& p) noexcept {
        ::pthread_mutex_lock(&fork_state.mutex);
        (p.prev_ != nullptr ? p.prev_->next_ : fork_state.head) = p.next_;
        if (p.next_ != nullptr) p.next_->prev_ = p.prev_;
        p.prev_ = p.next_ = nullptr;
        ::pthread_mutex_unlock(&fork_state.mutex);
    }

private:
    // The registry's lock is held from prepare() to parent() or child(), across the fork itself.
    static void prepare() noexcept {
        ::pthread_mutex_lock(&fork_state.mutex);
        for (fork_participant* p = fork_state.head; p != nullptr; p = p->next_) p->before_(p->self_);
    }
    static void parent() noexcept {
        for (fork_participant* p = fork_state.head; p != nullptr; p = p->next_) p->in_parent_(p->self_);
        ::pthread_mutex_unlock(&fork_state.mutex);
    }
    static void child() noexcept {
        for (fork_participant* p = fork_state.head; p != nullptr; p = p->next_) p->in_child_(p->self_);
        // The forking thread is the child's only thread, and it holds this lock.
        ::pthread_mutex_unlock(&fork_state.mutex);
    }
};

}  // namespace deferred_unmap::detail

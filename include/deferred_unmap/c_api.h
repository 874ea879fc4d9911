/* deferred_unmap/c_api.h - the reclaim queue for compositors written in C (C11, also valid C++).
 *
 * Guarantees: every pushed resource is torn down exactly once, oldest first, the mapping before the
 * descriptor, in budgeted steps from du_queue_drain(); see reclaim_queue.hpp for the model. No function
 * lets a C++ exception through. A push either takes ownership (returns 0) or returns -EINVAL and leaves
 * everything with the caller. Definitions: <deferred_unmap/c_api_impl.hpp>, included by exactly one
 * C++ source of the host, or the ready static library (CMake deferred_unmap::c, Meson deferred_unmap_c).
 *
 *   du_queue *q = du_queue_create(NULL);                  // defaults; NULL + errno on failure
 *   du_queue_push_region(q, pool->fd, pool->data, pool->size);   // wl_shm_pool gone: O(1), no syscall
 *   du_queue_drain(q, 1000000);                           // frame-commit hook: ~1 ms of teardown
 *   int64_t when = du_queue_next_deadline_ns(q);          // CLOCK_MONOTONIC idle timer, -1: disarm
 *   du_queue_destroy(q);                                  // flushes the rest
 *
 * Threads: push, next_deadline_ns and pending_bytes may be called from any thread; drain and flush from
 * any thread but one at a time; create and destroy from one thread with no other call in flight.
 */
#ifndef DEFERRED_UNMAP_C_API_H
#define DEFERRED_UNMAP_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define DU_NOEXCEPT noexcept /* lets C++ callers know; a stray throw terminates instead of unwinding C */
extern "C" {
#else
#define DU_NOEXCEPT
#endif

typedef struct du_queue du_queue;

typedef struct du_options {
    size_t unmap_chunk_bytes; /* largest munmap per step (rounded up to pages); must be > 0 */
    size_t max_pending_bytes; /* a push beyond this reclaims the oldest at once; SIZE_MAX: no cap */
    int64_t max_delay_ns;     /* how long work may wait without a drain; must be >= 0 */
    int close_on_worker;      /* nonzero: a worker thread makes the close() calls */
    int unmap_on_worker;      /* nonzero: the worker makes every call; drain only hands work over */
} du_options;

typedef struct du_drain_report {
    size_t steps;          /* munmap and close calls this drain made on the calling thread */
    size_t bytes_unmapped; /* page-rounded bytes this drain unmapped */
    size_t fds_closed;     /* descriptors this drain closed itself (not those handed to the worker) */
    int64_t elapsed_ns;    /* time spent inside the drain */
    size_t pending_bytes;  /* mapped bytes still waiting when it returned */
    size_t pending_items;  /* resources not yet fully torn down when it returned */
} du_drain_report;

/* Fills `opts` with the library's defaults; NULL is a no-op. No allocation, no syscall. */
void du_options_init(du_options *opts) DU_NOEXCEPT;

/* A new queue (NULL opts = defaults). Allocates; starts a thread if asked. NULL + errno on failure:
 * EINVAL (zero unmap_chunk_bytes, negative max_delay_ns), ENOMEM, EAGAIN (no thread). */
du_queue *du_queue_create(const du_options *opts) DU_NOEXCEPT;

/* Flushes everything (blocks for the whole teardown), stops the worker, frees `q`; NULL is a no-op. */
void du_queue_destroy(du_queue *q) DU_NOEXCEPT;

/* Takes a pool: unmaps [addr, addr + length), then closes fd. O(1), no syscall, any thread; allocates
 * only when a burst outgrows the queue; past max_pending_bytes it reclaims the oldest on this thread.
 * 0, or -EINVAL (NULL q, negative fd, NULL/MAP_FAILED/unaligned addr, zero length): caller keeps both. */
int du_queue_push_region(du_queue *q, int fd, void *addr, size_t length) DU_NOEXCEPT;

/* Takes a mapping whose descriptor is closed or owned elsewhere. As du_queue_push_region. */
int du_queue_push_mapping(du_queue *q, void *addr, size_t length) DU_NOEXCEPT;

/* Takes a descriptor. One fstat(2) sizes its close for the budget; otherwise as du_queue_push_region. */
int du_queue_push_fd(du_queue *q, int fd) DU_NOEXCEPT;

/* Runs steps while each predicted step fits what is left of `budget_ns` (the first always runs); never
 * allocates (except to hand a close to a full worker ring with close_on_worker), blocks about budget_ns
 * plus one step; with unmap_on_worker only wakes the worker.
 * budget_ns <= 0: does nothing but report the counts; NULL q: an all-zero report. */
du_drain_report du_queue_drain(du_queue *q, int64_t budget_ns) DU_NOEXCEPT;

/* Tears everything down now on this thread and waits for the worker. Blocks; NULL is a no-op. */
void du_queue_flush(du_queue *q) DU_NOEXCEPT;

/* When to drain even if no frame comes, in CLOCK_MONOTONIC ns (for a timerfd with TFD_TIMER_ABSTIME);
 * -1 when nothing waits or q is NULL. Any thread; takes a short lock. */
int64_t du_queue_next_deadline_ns(const du_queue *q) DU_NOEXCEPT;

/* Mapped bytes still waiting to be unmapped; 0 for NULL. Any thread, O(1). */
size_t du_queue_pending_bytes(const du_queue *q) DU_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif /* DEFERRED_UNMAP_C_API_H */

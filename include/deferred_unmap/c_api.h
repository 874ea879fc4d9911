/* deferred_unmap/c_api.h - the reclaim queue for compositors written in C (C11, also valid C++).
 *
 * Guarantees: every pushed resource is torn down exactly once, the mapping before the descriptor,
 * munmaps and closes each oldest first, no close before the munmap of anything pushed earlier (a
 * mapping pushed before its descriptor is unmapped first; a close a drain cannot hand to the worker
 * because its ring cannot grow is made at once and may pass older ones the worker holds), in
 * budgeted steps from du_queue_drain(); see reclaim_queue.hpp for the model. No function lets a C++
 * exception through. A push either takes ownership (returns 0) or returns -EINVAL and leaves
 * everything with the caller. Definitions: <deferred_unmap/c_api_impl.hpp>, included by exactly one
 * C++ source of the host, or the ready static library (CMake deferred_unmap::c, Meson
 * deferred_unmap_c).
 *
 *   du_queue_options opts;
 *   du_queue_options_init(&opts);                         // defaults: closes on a worker thread
 *   opts.on_error = log_reclaim_error;                    // optional, with opts.on_error_data
 *   du_queue *q = du_queue_create_with(&opts);            // NULL + errno on failure
 *   du_queue_push_region(q, pool->fd, pool->data, pool->size);   // wl_shm_pool gone: O(1), no syscall
 *   du_queue_drain(q, 1000000);                           // frame-commit hook: ~1 ms of teardown
 *   wl_event_source_timer_update(idle, du_queue_ms_until_deadline(q) + 1);  // -1 + 1 = 0: disarm
 *   wl_event_loop_add_fd(loop, du_queue_worker_fd(q), WL_EVENT_READABLE, worker_done, q);
 *   du_queue_destroy(q);                                  // flushes the rest
 *
 * Threads: push, next_deadline_ns, ms_until_deadline, pending_*, stats and the worker calls may be
 * called from any thread; drain, drain_until and flush from any thread (they run one at a time, a
 * drain waiting at most its budget); create and destroy from one thread with no other call in flight.
 * The worker thread starts with every asynchronous signal blocked, so a signalfd or
 * wl_event_loop_add_signal() in the host keeps receiving its signals, and is named du-reclaim.
 *
 * Binary compatibility: du_queue_options and du_stats carry their size, set by the init calls from
 * the caller's header, so a library built from a newer header reads and fills only what the caller
 * knows of, and gives the rest their defaults. A caller built against a newer header than the
 * library's may leave the fields that library does not know at zero (du_queue_options_init zeroes
 * them): anything else there is refused with E2BIG. du_options, du_options_init and du_queue_create
 * keep their first layout.
 */
#ifndef DEFERRED_UNMAP_C_API_H
#define DEFERRED_UNMAP_C_API_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* One failed system call during teardown; the resource it belongs to is still accounted for. */
typedef struct du_error {
    int op;          /* DU_OP_UNMAP or DU_OP_CLOSE */
    int error;       /* the errno value */
    void *addr;      /* the range passed to munmap (unmap only) */
    size_t length;
    int fd;          /* the descriptor passed to close (close only) */
    int recovered;   /* nonzero: a failed chunk whose fallback (unmapping the whole rest) succeeded */
} du_error;

#define DU_OP_UNMAP 0
#define DU_OP_CLOSE 1

/* Called for each failed munmap/close, on the thread that made it (possibly two at once): must be
 * thread-safe and must not call into the queue. `data` is on_error_data. */
typedef void (*du_error_fn)(void *data, const du_error *error);

/* Growable options: new fields are only ever added at the end. Fill with du_queue_options_init. */
typedef struct du_queue_options {
    size_t size;                /* sizeof(du_queue_options) as the caller compiled it (set by init) */
    size_t unmap_chunk_bytes;   /* largest munmap per step (rounded up to pages); must be > 0 */
    size_t max_pending_bytes;   /* a push beyond this reclaims the oldest at once; SIZE_MAX: no cap */
    int64_t max_delay_ns;       /* how long work may wait without a drain; must be >= 0 */
    int close_on_worker;        /* nonzero (default): a worker thread makes the close() calls */
    int unmap_on_worker;        /* nonzero: the worker makes every call; drain only hands work over */
    int low_priority_closes;    /* nonzero: a close-only worker runs at nice 10 */
    int64_t worker_pause_ns;    /* gap the unmapping worker leaves between chunks; 0 to 10 ms */
    double unmap_ns_per_byte;   /* cost model prior; finite and >= 0 */
    double close_ns_per_byte;   /* cost model prior; finite and >= 0 */
    int64_t call_overhead_ns;   /* cost model prior; >= 0 */
    size_t initial_capacity;    /* items reserved up front */
    du_error_fn on_error;       /* NULL: errors are only counted */
    void *on_error_data;
    int64_t max_step_ns;        /* longest a munmap step is predicted to hold mmap_lock; must be > 0 */
    int64_t drain_pause_ns;     /* sleep a drain takes between two munmap steps, from its budget; >= 0;
                                   not used with unmap_on_worker (worker_pause_ns is) */
    double max_step_deviations; /* steps leave room in max_step_ns for a munmap this many learned
                                   deviations slower than the mean; finite and >= 0 (default 2) */
    uint64_t max_pending_items; /* a push beyond this many items waiting reclaims the oldest at once;
                                   > 0 (default 16384); uint64_t so no layout pads after it */
    double first_step_ns_per_byte; /* munmap rate each pool's first step is sized and predicted at
                                      unless the model learned a slower one; finite and > 0 (default
                                      0.15) */
} du_queue_options;

/* Totals since the queue was made, and the last burst (from a push into an empty queue until it was
 * empty again). Growable like du_queue_options; fill with du_queue_stats(). */
typedef struct du_stats {
    size_t size; /* sizeof(du_stats) as the caller compiled it: the du_queue_stats macro sets it */
    uint64_t items_pushed, bytes_pushed, items_reclaimed, bytes_unmapped, fds_closed;
    uint64_t drains, busy_drains, steps, worker_steps, cap_steps, synchronous_pushes;
    uint64_t unmap_errors, close_errors, fallback_unmaps, bytes_leaked;
    uint64_t peak_pending_bytes, peak_pending_items;
    int64_t drain_p50_ns, drain_p99_ns, drain_max_ns; /* drains that ran a step */
    int64_t step_p99_ns, step_max_ns;                  /* steps on the draining thread */
    uint64_t bursts;                                   /* bursts completed */
    uint64_t burst_items, burst_bytes, burst_drains;   /* the last burst */
    int64_t burst_duration_ns, burst_worst_drain_ns;
    uint64_t unmap_steps_over_max_step;             /* munmap steps whose time exceeded max_step */
    int64_t unmap_prediction_error_p50_ns, unmap_prediction_error_p99_ns; /* |time - prediction| per munmap step */
    int64_t worker_error; /* the errno that kept the worker from starting (the queue runs inline); 0 */
} du_stats;

typedef struct du_drain_report {
    size_t steps;          /* munmap and close calls this drain made on the calling thread */
    size_t bytes_unmapped; /* page-rounded bytes this drain unmapped */
    size_t fds_closed;     /* descriptors this drain closed itself (not those handed to the worker) */
    int64_t elapsed_ns;    /* time spent inside the drain */
    size_t pending_bytes;  /* mapped bytes still waiting when it returned */
    size_t pending_items;  /* resources not yet fully torn down when it returned */
} du_drain_report;

/* Fills `opts` with the library's defaults; NULL is a no-op. No allocation, no syscall. Since du_options
 * cannot grow, it has no cost-model, priority or error-callback fields: use du_queue_options for those. */
void du_options_init(du_options *opts) DU_NOEXCEPT;

/* A new queue (NULL opts = defaults). Allocates; starts a thread if asked (where none can be started,
 * the queue tears down inline: see du_stats.worker_error). NULL + errno on failure: EINVAL (zero
 * unmap_chunk_bytes, negative max_delay_ns), ENOMEM. */
du_queue *du_queue_create(const du_options *opts) DU_NOEXCEPT;

/* Flushes everything (blocks for the whole teardown), stops the worker, frees `q`; NULL is a no-op. */
void du_queue_destroy(du_queue *q) DU_NOEXCEPT;

/* Takes a pool: unmaps [addr, addr + length), then closes fd. O(1), no syscall, any thread; allocates
 * only when a burst outgrows the queue; past max_pending_bytes it reclaims the oldest on this thread.
 * 0, or -EINVAL (NULL q, negative fd, NULL/MAP_FAILED/unaligned addr, zero length): caller keeps both. */
int du_queue_push_region(du_queue *q, int fd, void *addr, size_t length) DU_NOEXCEPT;

/* Takes a mapping whose descriptor is closed or owned elsewhere. As du_queue_push_region. */
int du_queue_push_mapping(du_queue *q, void *addr, size_t length) DU_NOEXCEPT;

/* Takes a descriptor. One fstat(2) checks it is open and sizes its close for the budget: -EBADF (and
 * nothing taken) when it is not open; otherwise as du_queue_push_region. */
int du_queue_push_fd(du_queue *q, int fd) DU_NOEXCEPT;

/* Runs steps while each predicted step fits what is left of `budget_ns` (the first always runs); never
 * allocates (except to hand a close to a full worker ring with close_on_worker), blocks about budget_ns
 * plus one step (or one late wake-up from drain_pause_ns); with unmap_on_worker only wakes the worker.
 * budget_ns <= 0: does nothing but report the counts; NULL q: an all-zero report. */
du_drain_report du_queue_drain(du_queue *q, int64_t budget_ns) DU_NOEXCEPT;

/* Tears everything down now and waits for the worker: munmaps on this thread, closes too, except
 * with close_on_worker alone, which hands them to the worker after those it holds (worker_fd then
 * becomes readable). Blocks; NULL is a no-op. */
void du_queue_flush(du_queue *q) DU_NOEXCEPT;

/* When to drain even if no frame comes, in CLOCK_MONOTONIC ns (for a timerfd with TFD_TIMER_ABSTIME);
 * -1 when nothing waits or q is NULL. Any thread; takes a short lock. */
int64_t du_queue_next_deadline_ns(const du_queue *q) DU_NOEXCEPT;

/* Mapped bytes still waiting to be unmapped; 0 for NULL. Any thread, O(1). */
size_t du_queue_pending_bytes(const du_queue *q) DU_NOEXCEPT;

/* Fills the first `size` bytes of `opts` with the defaults (zero past the fields this library knows)
 * and sets opts->size = size; use du_queue_options_init. No allocation, no syscall. */
void du_queue_options_init_sized(du_queue_options *opts, size_t size) DU_NOEXCEPT;

/* The defaults, for this header's layout. Inline, so the zeroing is this header's even where the
 * library is older and leaves the fields it does not know as they were. */
static inline void du_queue_options_init(du_queue_options *opts) DU_NOEXCEPT {
    if (opts == NULL) return;
    memset(opts, 0, sizeof *opts);
    du_queue_options_init_sized(opts, sizeof *opts);
}

/* A new queue from options filled by du_queue_options_init (NULL: defaults). A worker that cannot be
 * started (no thread, no pipe) leaves a queue that tears down inline, its errno in du_stats.worker_error.
 * NULL + errno on failure: EINVAL (a size no init call set, below this header's sizeof and not an
 * earlier layout's, a zero unmap_chunk_bytes or max_pending_items, a max_step_ns not > 0, a negative
 * delay or drain pause, a worker pause outside 0..10 ms, a negative, NaN or infinite prior or
 * max_step_deviations, a first_step_ns_per_byte that is not both finite and > 0, an overhead over a
 * day), E2BIG (a newer caller set fields this library does not
 * know), ENOMEM. */
du_queue *du_queue_create_with(const du_queue_options *opts) DU_NOEXCEPT;

/* Items not yet fully torn down, the worker's share included; 0 for NULL. Any thread, O(1). */
size_t du_queue_pending_items(const du_queue *q) DU_NOEXCEPT;

/* Runs steps while each is predicted to end by `deadline_ns` (CLOCK_MONOTONIC); never starts one that
 * is not, not even a first one; never waits past the deadline for another thread's steps. NULL q: an
 * all-zero report. */
du_drain_report du_queue_drain_until(du_queue *q, int64_t deadline_ns) DU_NOEXCEPT;

/* Milliseconds until the next deadline, rounded up, 0 when it has passed, -1 when nothing waits for a
 * drain or q is NULL: what wl_event_source_timer_update wants (there, 0 disarms: add 1 and arm only
 * when this is >= 0). Any thread. */
int du_queue_ms_until_deadline(const du_queue *q) DU_NOEXCEPT;

/* A descriptor that becomes readable when the worker runs out of work (then look at pending_items and
 * the deadline again); -1 without a worker or for NULL. Poll it for reading; do not read or close it. */
int du_queue_worker_fd(const du_queue *q) DU_NOEXCEPT;

/* Empties du_queue_worker_fd(); call it when the descriptor fires, before looking at the queue. */
void du_queue_worker_clear(du_queue *q) DU_NOEXCEPT;

/* Fills the first `size` bytes of `out`, zero past the fields this library knows; out->size then says
 * how many are real (less than `size` when the library knows fewer fields). Use the macro. NULL q:
 * zeroes. Any thread; never waits for a step.
 * busy_drains counts drains that found another thread at work for their whole budget (du_drain_report
 * cannot grow, so it has no such flag). */
void du_queue_stats_sized(const du_queue *q, du_stats *out, size_t size) DU_NOEXCEPT;
#define du_queue_stats(q, out) du_queue_stats_sized((q), (out), sizeof *(out))

#ifdef __cplusplus
}
#endif

#endif /* DEFERRED_UNMAP_C_API_H */

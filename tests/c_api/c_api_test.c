/* The C API from C11, against real memfds: what it takes, in what order it gives it back, and what it
 * refuses. The kernel is the witness: /proc/self/maps says which bytes of each pool are still mapped,
 * fcntl(F_GETFD) whether its descriptor is still open. A drain with a 1 ns budget runs exactly one step
 * (the first step always runs, no second one fits), so the order can be read between drains. */
#define _GNU_SOURCE
#include <deferred_unmap/c_api.h>

#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define CHECK(cond)                                                             \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            ++failures;                                                         \
        }                                                                       \
    } while (0)

static size_t page;

typedef struct pool {
    char name[32];
    int fd;
    unsigned char *addr;
    size_t length;
} pool;

/* A client pool as a compositor holds it: a memfd of `pages` pages, mapped, every page written. */
static pool make_pool(const char *name, size_t pages) {
    pool p;
    snprintf(p.name, sizeof p.name, "%s", name);
    p.length = pages * page;
    p.fd = memfd_create(name, MFD_CLOEXEC);
    CHECK(p.fd >= 0);
    CHECK(ftruncate(p.fd, (off_t)p.length) == 0);
    void *addr = mmap(NULL, p.length, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd, 0);
    CHECK(addr != MAP_FAILED);
    p.addr = addr;
    for (size_t at = 0; at < p.length; at += page) p.addr[at] = 0x5a;
    return p;
}

/* Bytes mapped in this process from files whose /proc/self/maps path contains `needle`. */
static size_t mapped_matching(const char *needle) {
    FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL) return SIZE_MAX;
    size_t total = 0;
    char line[512];
    while (fgets(line, sizeof line, maps) != NULL) {
        unsigned long long start = 0, end = 0;
        if (strstr(line, needle) != NULL && sscanf(line, "%llx-%llx", &start, &end) == 2) total += (size_t)(end - start);
    }
    fclose(maps);
    return total;
}

/* Bytes of memfd `name` mapped in this process. */
static size_t mapped_bytes(const char *name) {
    char needle[64];
    snprintf(needle, sizeof needle, "/memfd:%s ", name);
    return mapped_matching(needle);
}

static int is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

static int open_fds(void) {
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL) return -1;
    int count = 0;
    while (readdir(dir) != NULL) ++count;
    closedir(dir);
    return count;
}

static int64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* An inline queue (no worker): every call on the draining thread, so the order reads between drains. */
static du_queue *queue_with_chunk(size_t chunk) {
    du_options opts;
    du_options_init(&opts);
    opts.unmap_chunk_bytes = chunk;
    opts.close_on_worker = 0;
    du_queue *q = du_queue_create(&opts);
    CHECK(q != NULL);
    return q;
}

static void test_defaults_are_the_librarys(void) {
    du_options opts;
    memset(&opts, 0xff, sizeof opts);
    du_options_init(&opts);
    CHECK(opts.unmap_chunk_bytes == (size_t)64 << 20);
    CHECK(opts.max_pending_bytes == SIZE_MAX);
    CHECK(opts.max_delay_ns == 100000000);
    CHECK(opts.close_on_worker == 1); /* the recommended mode */
    CHECK(opts.unmap_on_worker == 0);
    du_options_init(NULL);
    du_queue *q = du_queue_create(NULL);
    CHECK(q != NULL);
    CHECK(du_queue_pending_bytes(q) == 0);
    CHECK(du_queue_next_deadline_ns(q) == -1);
    du_queue_destroy(q);
}

static void test_a_pool_is_unmapped_chunk_by_chunk_and_closed_last(void) {
    du_queue *q = queue_with_chunk(page);
    pool p = make_pool("du-order", 3);
    CHECK(du_queue_push_region(q, p.fd, p.addr, p.length) == 0);
    CHECK(du_queue_pending_bytes(q) == 3 * page);
    CHECK(mapped_bytes(p.name) == 3 * page); /* a push makes no syscall */

    for (size_t left = 2; left != (size_t)-1; --left) {
        du_drain_report r = du_queue_drain(q, 1);
        CHECK(r.steps == 1);
        CHECK(r.bytes_unmapped == page);
        CHECK(r.fds_closed == 0);
        CHECK(r.pending_bytes == left * page);
        CHECK(r.pending_items == 1);
        CHECK(r.elapsed_ns >= 0);
        CHECK(mapped_bytes(p.name) == left * page);
        CHECK(is_open(p.fd)); /* every byte unmapped before the close: close() frees the pages */
    }
    du_drain_report r = du_queue_drain(q, 1);
    CHECK(r.steps == 1 && r.fds_closed == 1 && r.bytes_unmapped == 0 && r.pending_items == 0);
    CHECK(!is_open(p.fd));
    CHECK(du_queue_drain(q, 1000000).steps == 0);
    du_queue_destroy(q);
}

static void test_pools_go_oldest_first(void) {
    du_queue *q = queue_with_chunk((size_t)1 << 20);
    pool a = make_pool("du-first", 2);
    pool b = make_pool("du-second", 2);
    CHECK(du_queue_push_region(q, a.fd, a.addr, a.length) == 0);
    CHECK(du_queue_push_region(q, b.fd, b.addr, b.length) == 0);
    du_queue_drain(q, 1); /* unmaps a */
    CHECK(mapped_bytes(a.name) == 0 && is_open(a.fd) && mapped_bytes(b.name) == b.length);
    du_queue_drain(q, 1); /* closes a */
    CHECK(!is_open(a.fd) && mapped_bytes(b.name) == b.length && is_open(b.fd));
    du_queue_drain(q, 1); /* unmaps b */
    CHECK(mapped_bytes(b.name) == 0 && is_open(b.fd));
    du_queue_destroy(q); /* closes b */
    CHECK(!is_open(b.fd));
}

static void test_a_drain_with_no_budget_does_nothing(void) {
    du_queue *q = queue_with_chunk(page);
    pool p = make_pool("du-nobudget", 2);
    CHECK(du_queue_push_region(q, p.fd, p.addr, p.length) == 0);
    du_drain_report r = du_queue_drain(q, 0);
    CHECK(r.steps == 0 && r.pending_bytes == 2 * page && r.pending_items == 1);
    r = du_queue_drain(q, -5);
    CHECK(r.steps == 0 && mapped_bytes(p.name) == 2 * page);
    du_queue_flush(q);
    CHECK(mapped_bytes(p.name) == 0 && !is_open(p.fd) && du_queue_pending_bytes(q) == 0);
    du_queue_destroy(q);
}

static void test_bare_mappings_and_descriptors_are_taken_too(void) {
    du_queue *q = queue_with_chunk(page);
    pool p = make_pool("du-parts", 2);
    CHECK(du_queue_push_mapping(q, p.addr, p.length) == 0);
    CHECK(du_queue_push_fd(q, p.fd) == 0);
    CHECK(du_queue_pending_bytes(q) == 2 * page); /* the descriptor maps nothing */
    du_queue_drain(q, 1);
    du_queue_drain(q, 1);
    CHECK(mapped_bytes(p.name) == 0 && is_open(p.fd));
    du_drain_report r = du_queue_drain(q, 1);
    CHECK(r.fds_closed == 1 && !is_open(p.fd) && r.pending_items == 0);
    du_queue_destroy(q);
}

/* Waits for the worker's descriptor, as wl_event_loop_add_fd would; 0 when it did not fire in time. */
static int worker_fired(du_queue *q, int timeout_ms) {
    struct pollfd done = {du_queue_worker_fd(q), POLLIN, 0};
    return poll(&done, 1, timeout_ms) == 1;
}

static void test_the_worker_modes_reclaim_everything(void) {
    for (int mode = 0; mode < 2; ++mode) {
        du_options opts;
        du_options_init(&opts);
        opts.close_on_worker = mode == 0;
        opts.unmap_on_worker = mode == 1;
        du_queue *q = du_queue_create(&opts);
        CHECK(q != NULL);
        CHECK(du_queue_worker_fd(q) >= 0);
        pool a = make_pool("du-worker-a", 16);
        pool b = make_pool("du-worker-b", 16);
        CHECK(du_queue_push_region(q, a.fd, a.addr, a.length) == 0);
        CHECK(du_queue_push_region(q, b.fd, b.addr, b.length) == 0);
        /* A budget no preemption can use up (the drain ends when nothing is left): a loaded machine
         * must not turn "this thread unmapped both" into "the budget ran out". */
        du_drain_report r = du_queue_drain(q, INT64_C(10000000000));
        CHECK(r.fds_closed == 0); /* closes belong to the worker in both modes */
        if (mode == 0) {
            CHECK(r.steps == 2 && r.bytes_unmapped == a.length + b.length); /* this thread unmapped */
            CHECK(mapped_bytes(a.name) == 0 && mapped_bytes(b.name) == 0);
        } else {
            CHECK(r.steps == 0); /* this thread made no call at all */
        }
        /* Nothing waits for a drain now: only the worker's descriptor says when it is over. */
        CHECK(du_queue_ms_until_deadline(q) == -1);
        while (du_queue_pending_items(q) > 0 && worker_fired(q, 10000)) du_queue_worker_clear(q);
        CHECK(du_queue_pending_items(q) == 0);
        CHECK(mapped_bytes(a.name) == 0 && mapped_bytes(b.name) == 0);
        CHECK(!is_open(a.fd) && !is_open(b.fd));
        du_stats s;
        du_queue_stats(q, &s);
        CHECK(s.worker_steps == (mode == 0 ? 2u : 4u));
        CHECK(s.fds_closed == 2);
        du_queue_destroy(q);
    }
}

static void test_destroy_flushes_what_is_left(void) {
    du_queue *q = queue_with_chunk(page);
    pool a = make_pool("du-destroy-a", 4);
    pool b = make_pool("du-destroy-b", 4);
    CHECK(du_queue_push_region(q, a.fd, a.addr, a.length) == 0);
    CHECK(du_queue_push_region(q, b.fd, b.addr, b.length) == 0);
    du_queue_destroy(q);
    CHECK(mapped_bytes(a.name) == 0 && mapped_bytes(b.name) == 0);
    CHECK(!is_open(a.fd) && !is_open(b.fd));
}

static void test_the_pending_cap_reclaims_on_the_pushing_thread(void) {
    du_options opts;
    du_options_init(&opts);
    opts.unmap_chunk_bytes = page;
    opts.max_pending_bytes = page;
    du_queue *q = du_queue_create(&opts);
    CHECK(q != NULL);
    pool p = make_pool("du-cap", 4);
    CHECK(du_queue_push_region(q, p.fd, p.addr, p.length) == 0);
    CHECK(du_queue_pending_bytes(q) <= page);
    CHECK(mapped_bytes(p.name) <= page);
    du_queue_destroy(q);
    CHECK(!is_open(p.fd));
}

static void test_the_deadline_is_max_delay_after_the_push_in_monotonic_ns(void) {
    du_options opts;
    du_options_init(&opts);
    opts.max_delay_ns = 50000000;
    du_queue *q = du_queue_create(&opts);
    CHECK(q != NULL);
    CHECK(du_queue_next_deadline_ns(q) == -1);
    pool p = make_pool("du-deadline", 1);
    const int64_t before = monotonic_ns();
    CHECK(du_queue_push_region(q, p.fd, p.addr, p.length) == 0);
    const int64_t after = monotonic_ns();
    const int64_t deadline = du_queue_next_deadline_ns(q);
    CHECK(deadline >= before + opts.max_delay_ns);
    CHECK(deadline <= after + opts.max_delay_ns);
    du_queue_flush(q);
    CHECK(du_queue_next_deadline_ns(q) == -1);
    du_queue_destroy(q);
}

/* A refused push must leave the pool exactly as it was: mapped, open, and the caller's to release. */
static void expect_still_owned(const pool *p, du_queue *q) {
    CHECK(mapped_bytes(p->name) == p->length);
    CHECK(is_open(p->fd));
    CHECK(du_queue_pending_bytes(q) == 0);
}

static void test_bad_arguments_get_einval_and_the_caller_keeps_everything(void) {
    du_queue *q = queue_with_chunk(page);
    pool p = make_pool("du-refused", 2);
    void *unaligned = p.addr + 1;

    CHECK(du_queue_push_region(NULL, p.fd, p.addr, p.length) == -EINVAL);
    CHECK(du_queue_push_region(q, -1, p.addr, p.length) == -EINVAL);
    CHECK(du_queue_push_region(q, p.fd, NULL, p.length) == -EINVAL);
    CHECK(du_queue_push_region(q, p.fd, MAP_FAILED, p.length) == -EINVAL);
    CHECK(du_queue_push_region(q, p.fd, unaligned, p.length) == -EINVAL);
    CHECK(du_queue_push_region(q, p.fd, p.addr, 0) == -EINVAL);
    CHECK(du_queue_push_region(q, p.fd, p.addr, SIZE_MAX) == -EINVAL); /* wraps past the address space */
    expect_still_owned(&p, q);

    CHECK(du_queue_push_mapping(NULL, p.addr, p.length) == -EINVAL);
    CHECK(du_queue_push_mapping(q, NULL, p.length) == -EINVAL);
    CHECK(du_queue_push_mapping(q, MAP_FAILED, p.length) == -EINVAL);
    CHECK(du_queue_push_mapping(q, unaligned, p.length) == -EINVAL);
    CHECK(du_queue_push_mapping(q, p.addr, 0) == -EINVAL);
    CHECK(du_queue_push_mapping(q, p.addr, SIZE_MAX) == -EINVAL);
    expect_still_owned(&p, q);

    CHECK(du_queue_push_fd(NULL, p.fd) == -EINVAL);
    CHECK(du_queue_push_fd(q, -1) == -EINVAL);
    expect_still_owned(&p, q);
    /* A descriptor that is not open is refused now, not found out at its close. */
    const int closed_fd = dup(p.fd);
    CHECK(closed_fd >= 0 && close(closed_fd) == 0);
    CHECK(du_queue_push_fd(q, closed_fd) == -EBADF);
    CHECK(du_queue_pending_items(q) == 0);

    /* Nothing was queued: draining and destroying touch none of it. */
    CHECK(du_queue_drain(q, 1000000).steps == 0);
    du_queue_destroy(q);
    expect_still_owned(&p, NULL);
    CHECK(p.addr[0] == 0x5a); /* still readable */
    CHECK(munmap(p.addr, p.length) == 0);
    CHECK(close(p.fd) == 0); /* the caller's close is the only one */
}

static void test_bad_options_and_null_queues_are_refused_quietly(void) {
    du_options opts;
    du_options_init(&opts);
    opts.unmap_chunk_bytes = 0;
    errno = 0;
    CHECK(du_queue_create(&opts) == NULL && errno == EINVAL);
    du_options_init(&opts);
    opts.max_delay_ns = -1;
    errno = 0;
    CHECK(du_queue_create(&opts) == NULL && errno == EINVAL);

    du_queue_destroy(NULL);
    du_queue_flush(NULL);
    du_drain_report r = du_queue_drain(NULL, 1000000);
    CHECK(r.steps == 0 && r.bytes_unmapped == 0 && r.fds_closed == 0 && r.pending_items == 0);
    CHECK(du_queue_next_deadline_ns(NULL) == -1);
    CHECK(du_queue_pending_bytes(NULL) == 0);
}

static void test_options_grow_without_breaking_older_callers(void) {
    du_queue_options opts;
    memset(&opts, 0xff, sizeof opts);
    du_queue_options_init(&opts);
    CHECK(opts.size == sizeof opts);
    CHECK(opts.close_on_worker == 1 && opts.unmap_on_worker == 0 && opts.low_priority_closes == 0);
    CHECK(opts.unmap_chunk_bytes == (size_t)64 << 20 && opts.on_error == NULL);
    /* A caller built against the first layout, which ended at on_error_data: the rest takes the
     * defaults. */
    du_queue_options old;
    memset(&old, 0xff, sizeof old);
    const size_t old_size = offsetof(du_queue_options, max_step_ns);
    du_queue_options_init_sized(&old, old_size);
    CHECK(old.size == old_size);
    CHECK(old.max_step_ns != 200000); /* untouched: beyond what that caller knows of */
    old.close_on_worker = 0;
    du_queue *q = du_queue_create_with(&old);
    CHECK(q != NULL);
    CHECK(du_queue_worker_fd(q) == -1);
    du_queue_destroy(q);
    /* Smaller than any layout there was: a size field that is not what the init call set. */
    const size_t too_small[] = {4, offsetof(du_queue_options, low_priority_closes), old_size - 1};
    for (size_t i = 0; i < sizeof too_small / sizeof too_small[0]; ++i) {
        old.size = too_small[i];
        errno = 0;
        CHECK(du_queue_create_with(&old) == NULL && errno == EINVAL);
    }
    /* Cut inside a field (part of it the caller's bytes, the rest the default's), however valid
     * every field is. */
    const size_t cut[] = {old_size + 4, offsetof(du_queue_options, max_step_deviations) + 1, sizeof opts - 4};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; ++i) {
        du_queue_options_init(&opts);
        opts.size = cut[i];
        errno = 0;
        CHECK(du_queue_create_with(&opts) == NULL && errno == EINVAL);
    }
    q = du_queue_create_with(NULL);
    CHECK(q != NULL && du_queue_worker_fd(q) >= 0);
    du_queue_destroy(q);

    /* A caller built against a newer header, with a field this library does not know set: refused. */
    struct newer {
        du_queue_options known;
        int64_t unknown;
    } future;
    memset(&future, 0xff, sizeof future);
    du_queue_options_init_sized(&future.known, sizeof future);
    CHECK(future.known.size == sizeof future);
    CHECK(future.unknown == 0); /* init clears what this library does not know */
    q = du_queue_create_with(&future.known);
    CHECK(q != NULL);
    du_queue_destroy(q);
    future.unknown = 1;
    errno = 0;
    CHECK(du_queue_create_with(&future.known) == NULL && errno == E2BIG);
    future.unknown = 0; /* left at zero, it means "the default": accepted */
    q = du_queue_create_with(&future.known);
    CHECK(q != NULL);
    /* Stats asked for with a larger struct: size says how much the library filled. */
    struct newer_stats {
        du_stats known;
        uint64_t unknown;
    } more;
    memset(&more, 0xff, sizeof more);
    du_queue_stats_sized(q, &more.known, sizeof more);
    CHECK(more.known.size == sizeof(du_stats));
    CHECK(more.unknown == 0); /* all `size` bytes filled: what this library does not know, with zeros */
    du_queue_destroy(q);
}

/* Each of `bad` in `*field` of `opts` (otherwise valid) makes du_queue_create_with fail with EINVAL. */
static void expect_refused(du_queue_options *opts, int64_t *field, const int64_t *bad, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        *field = bad[i];
        errno = 0;
        CHECK(du_queue_create_with(opts) == NULL && errno == EINVAL);
    }
}

static void test_bad_priors_are_refused(void) {
    const double bad[] = {-1.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        du_queue_options opts;
        du_queue_options_init(&opts);
        opts.unmap_ns_per_byte = bad[i];
        errno = 0;
        CHECK(du_queue_create_with(&opts) == NULL && errno == EINVAL);
    }
    du_queue_options opts;
    du_queue_options_init(&opts);
    opts.call_overhead_ns = -1;
    errno = 0;
    CHECK(du_queue_create_with(&opts) == NULL && errno == EINVAL);
    opts.call_overhead_ns = INT64_MAX; /* would overflow every prediction */
    errno = 0;
    CHECK(du_queue_create_with(&opts) == NULL && errno == EINVAL);
    du_queue_options_init(&opts);
    CHECK(opts.max_step_ns == 200000);
    const int64_t bad_steps[] = {0, -1};
    expect_refused(&opts, &opts.max_step_ns, bad_steps, sizeof bad_steps / sizeof bad_steps[0]);
    du_queue_options_init(&opts);
    CHECK(opts.worker_pause_ns == 100000);
    const int64_t bad_worker_pauses[] = {-1, 10000001, INT64_MAX};
    expect_refused(&opts, &opts.worker_pause_ns, bad_worker_pauses, sizeof bad_worker_pauses / sizeof bad_worker_pauses[0]);
    du_queue_options_init(&opts);
    CHECK(opts.max_pending_items == 16384);
    opts.max_pending_items = 0;
    errno = 0;
    CHECK(du_queue_create_with(&opts) == NULL && errno == EINVAL);
    du_queue_options_init(&opts);
    CHECK(opts.drain_pause_ns == 0);
    opts.drain_pause_ns = -1;
    errno = 0;
    CHECK(du_queue_create_with(&opts) == NULL && errno == EINVAL);
    du_queue_options_init(&opts);
    CHECK(opts.max_step_deviations == 2.0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        opts.max_step_deviations = bad[i];
        errno = 0;
        CHECK(du_queue_create_with(&opts) == NULL && errno == EINVAL);
    }
    du_queue_options_init(&opts);
    CHECK(opts.first_step_ns_per_byte == 0.15);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        opts.first_step_ns_per_byte = bad[i];
        errno = 0;
        CHECK(du_queue_create_with(&opts) == NULL && errno == EINVAL);
    }
    opts.first_step_ns_per_byte = 0.0; /* a zero rate would size a first step without bound */
    errno = 0;
    CHECK(du_queue_create_with(&opts) == NULL && errno == EINVAL);
    /* A caller built before max_step_ns: its queue takes the default, not the zero it never set. */
    du_queue_options old;
    du_queue_options_init_sized(&old, offsetof(du_queue_options, max_step_ns));
    du_queue *q = du_queue_create_with(&old);
    CHECK(q != NULL);
    du_queue_destroy(q);
}

static int errors_seen;
static int last_errno;
static void count_error(void *data, const du_error *error) {
    CHECK(data == &errors_seen);
    ++errors_seen;
    last_errno = error->op == DU_OP_CLOSE ? error->error : -1;
}

static void test_errors_reach_the_callback_and_the_stats(void) {
    du_queue_options opts;
    du_queue_options_init(&opts);
    opts.close_on_worker = 0;
    opts.on_error = count_error;
    opts.on_error_data = &errors_seen;
    du_queue *q = du_queue_create_with(&opts);
    CHECK(q != NULL);
    const int fd = memfd_create("du-error", MFD_CLOEXEC);
    CHECK(du_queue_push_fd(q, fd) == 0);
    CHECK(close(fd) == 0); /* a host bug: the queue's own close now fails with EBADF */
    du_queue_flush(q);
    CHECK(errors_seen == 1 && last_errno == EBADF);
    du_stats s;
    du_queue_stats(q, &s);
    CHECK(s.size == sizeof s);
    CHECK(s.close_errors == 1 && s.items_reclaimed == 1);
    du_queue_destroy(q);
}

static void test_drain_until_stats_and_the_deadline_in_milliseconds(void) {
    du_queue_options opts;
    du_queue_options_init(&opts);
    opts.close_on_worker = 0;
    opts.max_delay_ns = 40000000;
    opts.unmap_chunk_bytes = page;
    opts.max_step_ns = 1; /* every munmap step runs past it */
    du_queue *q = du_queue_create_with(&opts);
    CHECK(q != NULL);
    CHECK(du_queue_ms_until_deadline(q) == -1);
    pool p = make_pool("du-until", 8);
    CHECK(du_queue_push_region(q, p.fd, p.addr, p.length) == 0);
    const int ms = du_queue_ms_until_deadline(q);
    CHECK(ms > 30 && ms <= 40);
    CHECK(du_queue_pending_items(q) == 1);
    /* Already late: nothing may start, not even a first step. */
    du_drain_report r = du_queue_drain_until(q, monotonic_ns() - 1000000);
    CHECK(r.steps == 0 && mapped_bytes(p.name) == p.length);
    r = du_queue_drain_until(q, monotonic_ns() + 1000000000);
    CHECK(r.steps == 9 && du_queue_pending_items(q) == 0);
    du_stats s;
    du_queue_stats(q, &s);
    CHECK(s.bursts == 1 && s.burst_items == 1 && s.burst_bytes == p.length && s.burst_drains == 1);
    CHECK(s.burst_duration_ns > 0 && s.burst_worst_drain_ns > 0);
    CHECK(s.unmap_steps_over_max_step == 8 && s.unmap_prediction_error_p99_ns >= s.unmap_prediction_error_p50_ns);
    du_queue_stats(NULL, &s);
    CHECK(s.items_pushed == 0 && s.size == sizeof s);
    CHECK(du_queue_pending_items(NULL) == 0 && du_queue_worker_fd(NULL) == -1 && du_queue_ms_until_deadline(NULL) == -1);
    du_queue_destroy(q);
    CHECK(!is_open(p.fd));
}

int main(void) {
    page = (size_t)sysconf(_SC_PAGESIZE);
    const int fds_at_start = open_fds();

    test_defaults_are_the_librarys();
    test_a_pool_is_unmapped_chunk_by_chunk_and_closed_last();
    test_pools_go_oldest_first();
    test_a_drain_with_no_budget_does_nothing();
    test_bare_mappings_and_descriptors_are_taken_too();
    test_the_worker_modes_reclaim_everything();
    test_destroy_flushes_what_is_left();
    test_the_pending_cap_reclaims_on_the_pushing_thread();
    test_the_deadline_is_max_delay_after_the_push_in_monotonic_ns();
    test_bad_arguments_get_einval_and_the_caller_keeps_everything();
    test_bad_options_and_null_queues_are_refused_quietly();
    test_options_grow_without_breaking_older_callers();
    test_bad_priors_are_refused();
    test_errors_reach_the_callback_and_the_stats();
    test_drain_until_stats_and_the_deadline_in_milliseconds();

    CHECK(open_fds() == fds_at_start);
    CHECK(mapped_matching("/memfd:du-") == 0);
    if (failures != 0) {
        fprintf(stderr, "c_api_test: %d check(s) failed\n", failures);
        return 1;
    }
    printf("c_api_test: all checks passed\n");
    return 0;
}

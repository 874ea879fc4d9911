// pool_workload: a process whose shm pools die the two ways compositors tear them down, for the
// tracer's test (tests/tracer/run_test.py). Makes N memfds of BYTES with every page written, prints
// "ready", and on a line from stdin tears them all down:
//   main    maps each now (so the tracer sees the mmap), then closes it first and unmaps it, on the
//           main thread (libwayland's wl_shm, KWin): the pages are freed on the main thread, in the
//           task work after each munmap returns
//   worker  mapped before "ready" (the tracer learns them from /proc/PID/maps); the main thread
//           unmaps each in two steps, front half first (as deferred_unmap cuts a munmap), then a
//           thread named "pool-closer" closes them all (close_on_worker): the pages are freed on
//           that thread, inside close()
//   crowded main's teardown with a thread spinning on the main thread's CPU (both pinned there), and
//           50 ms of the main thread's own work after the last munmap before it waits: the
//           scheduler must preempt the main thread within its teardown stretch
// After the teardown it prints "done" with the teardown's wall and CPU time (the process's, every
// thread: what a tracer attached adds to it), then waits 300 ms in poll(), as an event loop would,
// so the tracer sees the end of its teardown stretch, and exits 0.
//
//   pool_workload N BYTES main|worker|crowded
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct pool {
    int fd;
    void* data;
};

struct closer {
    struct pool* pools;
    long count;
};

static void fail(const char* what) {
    fprintf(stderr, "pool_workload: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void map_pool(struct pool* pool, size_t bytes) {
    pool->data = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pool->fd, 0);
    if (pool->data == MAP_FAILED) fail("mmap");
}

static void make_pools(struct pool* pools, long count, size_t bytes, int map_now) {
    for (long i = 0; i < count; ++i) {
        pools[i].fd = memfd_create("pool_workload", MFD_CLOEXEC);
        if (pools[i].fd < 0) fail("memfd_create");
        if (ftruncate(pools[i].fd, (off_t)bytes) != 0) fail("ftruncate");
        map_pool(&pools[i], bytes);
        memset(pools[i].data, 0x5a, bytes);  // every page in the page cache: the tracer counts folios
        if (!map_now && munmap(pools[i].data, bytes) != 0) fail("munmap");
    }
}

static void* close_all(void* arg) {
    const struct closer* job = arg;
    for (long i = 0; i < job->count; ++i)
        if (close(job->pools[i].fd) != 0) fail("close on the closer thread");
    return NULL;
}

static void closed_first(struct pool* pools, long count, size_t bytes) {
    for (long i = 0; i < count; ++i) map_pool(&pools[i], bytes);
    for (long i = 0; i < count; ++i) {
        if (close(pools[i].fd) != 0) fail("close");
        if (munmap(pools[i].data, bytes) != 0) fail("munmap");
    }
}

static void closed_on_thread(struct pool* pools, long count, size_t bytes) {
    const size_t front = bytes / 2 / 4096 * 4096;
    for (long i = 0; i < count; ++i) {
        char* data = pools[i].data;
        if (munmap(data, front) != 0 || munmap(data + front, bytes - front) != 0) fail("munmap");
    }
    struct closer job = {pools, count};
    pthread_t thread;
    if ((errno = pthread_create(&thread, NULL, close_all, &job)) != 0) fail("pthread_create");
    pthread_setname_np(thread, "pool-closer");
    poll(NULL, 0, 100);  // the main thread back in its "event loop" while the closer works
    if ((errno = pthread_join(thread, NULL)) != 0) fail("pthread_join");
}

static double ms_between(struct timespec from, struct timespec to) {
    return (double)(to.tv_sec - from.tv_sec) * 1e3 + (double)(to.tv_nsec - from.tv_nsec) / 1e6;
}

static void pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if ((errno = pthread_setaffinity_np(pthread_self(), sizeof set, &set)) != 0) fail("pthread_setaffinity_np");
}

static void* spin_until(void* arg) {
    const atomic_int* stop = arg;
    while (!atomic_load_explicit(stop, memory_order_relaxed)) {}
    return NULL;
}

static void work_for_ms(double ms) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    now = start;
    while (ms_between(start, now) < ms) clock_gettime(CLOCK_MONOTONIC, &now);
}

static void crowded(struct pool* pools, long count, size_t bytes) {
    // SCHED_OTHER whatever the test was started with: a SCHED_FIFO spinner would never yield the CPU.
    const struct sched_param normal = {0};
    if (sched_setscheduler(0, SCHED_OTHER, &normal) != 0) fail("sched_setscheduler");
    const int cpu = sched_getcpu();
    if (cpu < 0) fail("sched_getcpu");
    pin_to(cpu);
    atomic_int stop = 0;
    pthread_t hog;  // inherits the policy and the one-CPU affinity
    if ((errno = pthread_create(&hog, NULL, spin_until, &stop)) != 0) fail("pthread_create");
    pthread_setname_np(hog, "hog");
    closed_first(pools, count, bytes);
    work_for_ms(50);
    atomic_store(&stop, 1);
    if ((errno = pthread_join(hog, NULL)) != 0) fail("pthread_join");
}

int main(int argc, char** argv) {
    if (argc != 4 || (strcmp(argv[3], "main") != 0 && strcmp(argv[3], "worker") != 0 && strcmp(argv[3], "crowded") != 0)) {
        fprintf(stderr, "usage: pool_workload N BYTES main|worker|crowded\n");
        return 2;
    }
    const long count = atol(argv[1]);
    const size_t bytes = (size_t)atoll(argv[2]);
    if (count <= 0 || bytes == 0) {
        fprintf(stderr, "pool_workload: N and BYTES must be positive\n");
        return 2;
    }
    struct pool* pools = calloc((size_t)count, sizeof *pools);
    if (pools == NULL) fail("calloc");
    make_pools(pools, count, bytes, strcmp(argv[3], "worker") == 0);
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL) return 1;  // the test went away: no teardown to see
    struct timespec start, end, cpu_start, cpu_end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_start);
    if (strcmp(argv[3], "main") == 0) closed_first(pools, count, bytes);
    else if (strcmp(argv[3], "crowded") == 0) crowded(pools, count, bytes);
    else closed_on_thread(pools, count, bytes);
    clock_gettime(CLOCK_MONOTONIC, &end);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_end);
    printf("done teardown_ms=%.3f cpu_ms=%.3f\n", ms_between(start, end), ms_between(cpu_start, cpu_end));
    fflush(stdout);
    poll(NULL, 0, 300);  // the event loop's wait: ends the main thread's teardown stretch
    free(pools);
    return 0;
}

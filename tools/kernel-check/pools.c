/* Workload for trace_teardown.bt: builds 40 memfd pools the size the project's
 * pools are (20736000 bytes, 19.8 MiB), writes every page, then tears them down
 * closed-first and unmapped-first, each order twice (closed, unmapped, closed,
 * unmapped). The thread name names the phase, so the bpftrace script can key
 * every figure on comm without a marker syscall of its own. Each munmap and
 * close is timed here too, as a caller would time it: that includes the task
 * work the kernel runs on the way back to user space, which the syscall
 * tracepoints leave out.
 *
 * Build: cc -O2 -o pools pools.c   Usage: pools [pools-per-phase] [rounds]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

enum { pool_size = 20736000 };

struct pool { int fd; char *p; };

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  /* vDSO: no syscall to skew the trace */
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void build(struct pool *v, int n)
{
    prctl(PR_SET_NAME, "du-setup");
    long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < n; i++) {
        v[i].fd = memfd_create("du-pool", MFD_CLOEXEC);
        if (v[i].fd < 0 || ftruncate(v[i].fd, pool_size) != 0) { perror("memfd"); exit(1); }
        v[i].p = mmap(NULL, pool_size, PROT_READ | PROT_WRITE, MAP_SHARED, v[i].fd, 0);
        if (v[i].p == MAP_FAILED) { perror("mmap"); exit(1); }
        for (long off = 0; off < pool_size; off += page) v[i].p[off] = 1;
    }
}

static void tear_down(struct pool *v, int n, int closed_first, int round)
{
    char name[16];
    snprintf(name, sizeof name, "du-%s-%d", closed_first ? "closed" : "unmap", round % 100);
    prctl(PR_SET_NAME, name);
    double t_munmap = 0, t_close = 0;
    for (int i = 0; i < n; i++) {
        double a, b;
        if (closed_first) {
            a = now_us(); close(v[i].fd); b = now_us(); t_close += b - a;
            a = now_us(); munmap(v[i].p, pool_size); b = now_us(); t_munmap += b - a;
        } else {
            a = now_us(); munmap(v[i].p, pool_size); b = now_us(); t_munmap += b - a;
            a = now_us(); close(v[i].fd); b = now_us(); t_close += b - a;
        }
    }
    prctl(PR_SET_NAME, "du-idle");
    printf("%s caller-timed: munmap %.1f ms, close %.1f ms, %d calls each\n",
           name, t_munmap / 1e3, t_close / 1e3, n);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 40;
    int rounds = argc > 2 ? atoi(argv[2]) : 2;
    struct pool *v = calloc(n, sizeof *v);
    if (!v || n <= 0 || rounds <= 0) return 2;
    for (int r = 1; r <= rounds; r++) {
        build(v, n); tear_down(v, n, 1, r);
        build(v, n); tear_down(v, n, 0, r);
    }
    return 0;
}

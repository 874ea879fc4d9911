// Spins on CLOCK_MONOTONIC for N seconds; counts gaps between two reads, and the thread's
// involuntary context switches, to tell off-CPU time the guest sees from time it does not.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
int main(int argc, char** argv) {
    long long secs = argc > 1 ? atoll(argv[1]) : 20, end = now() + secs * 1000000000LL, prev = now(), worst = 0;
    long b200 = 0, b500 = 0, b1000 = 0, b2000 = 0, quiet1000 = 0; long long quiet_worst = 0;
    struct rusage r0; getrusage(RUSAGE_THREAD, &r0); long sw = r0.ru_nivcsw + r0.ru_nvcsw;
    while (prev < end) {
        long long t = now(), g = t - prev; prev = t;
        if (g > worst) worst = g;
        if (g > 200000) { struct rusage r; getrusage(RUSAGE_THREAD, &r); long s2 = r.ru_nivcsw + r.ru_nvcsw; if (s2 == sw && g > 1000000) quiet1000++; if (s2 == sw && g > quiet_worst) quiet_worst = g; sw = s2; prev = now(); b200++; }
        if (g > 500000) b500++;
        if (g > 1000000) b1000++;
        if (g > 2000000) b2000++;
    }
    struct rusage u; getrusage(RUSAGE_THREAD, &u);
    printf("%llds: gaps >0.2ms %ld, >0.5ms %ld, >1ms %ld, >2ms %ld, worst %.3f ms; involuntary switches %ld; gaps >1ms with no switch %ld, worst such %.3f ms\n",
           secs, b200, b500, b1000, b2000, worst / 1e6, u.ru_nivcsw, quiet1000, quiet_worst / 1e6);
    return 0;
}

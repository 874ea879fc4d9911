/* timing.h: what ipi.c and ipi-free.c share: a clock, pinning to a CPU, and a line of figures.
 * report() prints KIND padded to WIDTH, so each program's lines align as they did when run. */
#ifndef IPI_TIMING_H
#define IPI_TIMING_H

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof set, &set);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Sorts t: median, p99, max and the count over 0.5 ms of n calls, in us. */
static void report(int width, const char *kind, double *t, int n)
{
	int over = 0;
	for (int i = 0; i < n; i++)
		over += t[i] > 500;
	qsort(t, n, sizeof *t, cmp);
	printf("%-*s %5d calls  median %7.1f us  p99 %7.1f us  max %7.1f us  over 0.5 ms: %d\n", width, kind, n,
	       t[n / 2], t[n * 99 / 100], t[n - 1], over);
}

#endif

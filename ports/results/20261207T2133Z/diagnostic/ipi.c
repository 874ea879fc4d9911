/* ipi.c: what a thread on CPU 0 pays, in one system call, for work that needs CPU 1, when CPU 1 is
 * idle and when it is busy. Two calls of a compositor's drain do: FUTEX_WAKE of a thread that sleeps
 * on CPU 1 (the reclaim worker), and munmap() of a range whose page tables go, which flushes the TLB
 * of every CPU that still has the process's mm (CPU 1 after that thread ran there).
 *   ipi [ROUNDS [GAP_US]]   ->  per mode: calls, median, p99 and max us, and how many took over 0.5 ms
 * A "busy" mode keeps CPU 1 running a spinning child process (SCHED_OTHER, nice 19) first. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "timing.h"

static atomic_int word;
static atomic_int stop;
static int gap_us = 5000;

static void *sleeper(void *arg)
{
	(void)arg;
	pin(1);
	while (!atomic_load(&stop)) {
		int seen = atomic_load(&word);
		syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
	}
	return NULL;
}

/* FUTEX_WAKE of the sleeper, 5 ms apart (GAP_US, default 5 ms: CPU 1 halts in between when nothing else runs). */
static void wakes(const char *mode, int rounds)
{
	double *t = calloc(rounds, sizeof *t);
	for (int i = 0; i < rounds; i++) {
		usleep(gap_us);
		atomic_fetch_add(&word, 1);
		double t0 = now_us();
		syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
		t[i] = now_us() - t0;
	}
	report(22, mode, t, rounds);
	free(t);
}

/* munmap() of a touched 2 MiB range of a memfd kept open (no page is freed; its page table goes),
 * after the sleeper ran on CPU 1. */
static void unmaps(const char *mode, int rounds)
{
	int memfd = memfd_create("ipi", 0);
	ftruncate(memfd, 2 << 20);
	double *t = calloc(rounds, sizeof *t);
	for (int i = 0; i < rounds; i++) {
		char *p = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
		for (size_t off = 0; off < (2u << 20); off += 4096)
			p[off] = 1;
		atomic_fetch_add(&word, 1);
		syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
		usleep(gap_us);
		double t0 = now_us();
		munmap(p, 2 << 20);
		t[i] = now_us() - t0;
	}
	report(22, mode, t, rounds);
	free(t);
	close(memfd);
}

static pid_t spin_on_cpu1(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		pin(1);
		setpriority(PRIO_PROCESS, 0, 19);
		for (;;)
			;
	}
	usleep(100000);
	return pid;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 400;
	gap_us = argc > 2 ? atoi(argv[2]) : 5000;
	pthread_t th;
	pin(0);
	pthread_create(&th, NULL, sleeper, NULL);
	usleep(10000);
	wakes("futex_wake, cpu1 idle", rounds);
	unmaps("munmap, cpu1 idle", rounds);
	pid_t spinner = spin_on_cpu1();
	wakes("futex_wake, cpu1 busy", rounds);
	unmaps("munmap, cpu1 busy", rounds);
	kill(spinner, SIGKILL);
	waitpid(spinner, NULL, 0);
	usleep(100000);
	wakes("futex_wake, cpu1 idle", rounds);
	unmaps("munmap, cpu1 idle", rounds);
	atomic_store(&stop, 1);
	atomic_fetch_add(&word, 1);
	syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	pthread_join(th, NULL);
	return 0;
}

/* ipi-free.c: the calls of ipi.c, made the way a drain makes them during a burst: a thread on CPU 1
 * (the reclaim worker) has just closed a memfd of MIB MiB whose mapping is gone, so that close()
 * freed its pages there, and gone back to sleep; GAP_US later the thread on CPU 0 unmaps 2 MiB of
 * another open memfd (its page table goes: a TLB flush for CPU 1, which still has the mm) and wakes
 * the sleeper. Each round is made with the close freeing MIB MiB, and with it freeing nothing (a
 * memfd never touched), alternately: the same run's control.
 *   ipi-free [ROUNDS [GAP_US [MIB]]]   -> per kind: median, p99 and max us, and calls over 0.5 ms */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "timing.h"

static atomic_int word;
static atomic_int to_close = -1;
static atomic_int closed;

static void wake(void)
{
	atomic_fetch_add(&word, 1);
	syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* The worker: close what it is given, then sleep until the next wake. */
static void *worker(void *arg)
{
	(void)arg;
	pin(1);
	for (;;) {
		int seen = atomic_load(&word);
		int fd = atomic_exchange(&to_close, -1);
		if (fd == -2)
			return NULL;
		if (fd >= 0) {
			close(fd);
			atomic_store(&closed, 1);
		}
		syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
	}
}

/* A memfd of `bytes`, its pages made (touched through a mapping that is then unmapped) or not. */
static int pool(size_t bytes, int touch)
{
	int fd = memfd_create("pool", 0);
	ftruncate(fd, bytes);
	if (touch) {
		char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		for (size_t off = 0; off < bytes; off += 4096)
			p[off] = 1;
		munmap(p, bytes);
	}
	return fd;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 200;
	int gap_us = argc > 2 ? atoi(argv[2]) : 5000;
	size_t bytes = (size_t)(argc > 3 ? atoi(argv[3]) : 20) << 20;
	double *t[4];
	int n[4] = {0};
	for (int k = 0; k < 4; k++)
		t[k] = calloc(rounds, sizeof(double));
	int other = memfd_create("other", 0);
	ftruncate(other, 2 << 20);
	pthread_t th;
	pin(0);
	pthread_create(&th, NULL, worker, NULL);
	for (int i = 0; i < 2 * rounds; i++) {
		int freeing = i % 2;
		atomic_store(&closed, 0);
		atomic_store(&to_close, pool(bytes, freeing));
		wake();
		while (!atomic_load(&closed))
			usleep(100);
		char *p = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, other, 0);
		for (size_t off = 0; off < (2u << 20); off += 4096)
			p[off] = 1;
		usleep(gap_us);
		double t0 = now_us();
		munmap(p, 2 << 20);
		double t1 = now_us();
		wake();
		double t2 = now_us();
		t[freeing * 2][n[freeing * 2]++] = t1 - t0;
		t[freeing * 2 + 1][n[freeing * 2 + 1]++] = t2 - t1;
	}
	atomic_store(&to_close, -2);
	wake();
	pthread_join(th, NULL);
	report(34, "munmap, worker's close freed none", t[0], n[0]);
	report(34, "futex_wake, worker's close freed none", t[1], n[1]);
	report(34, "munmap, worker's close freed MIB", t[2], n[2]);
	report(34, "futex_wake, worker's close freed MIB", t[3], n[3]);
	return 0;
}

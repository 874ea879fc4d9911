/* The same program in C, through <deferred_unmap/c_api.h>. Exit status 0 only if the pool was reclaimed. */
#define _GNU_SOURCE
#include <deferred_unmap/c_api.h>

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int main(void) {
    const size_t bytes = (size_t)1 << 20;
    const int fd = memfd_create("consumer", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) return 1;
    void *addr = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) return 1;

    du_queue *q = du_queue_create(NULL);
    if (q == NULL || du_queue_push_region(q, fd, addr, bytes) != 0) return 1;
    int frames = 0;
    for (; du_queue_pending_bytes(q) > 0; ++frames) du_queue_drain(q, 1000000);
    du_queue_destroy(q);

    const int reclaimed = fcntl(fd, F_GETFD) == -1;
    printf("deferred_unmap from C: %s after %d frame(s)\n", reclaimed ? "pool reclaimed" : "POOL NOT RECLAIMED", frames);
    return reclaimed ? 0 : 1;
}

/* Expected output:
 *   deferred_unmap from C: pool reclaimed after 1 frame(s)
 */

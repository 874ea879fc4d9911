/* A C compositor's signal handling beside the queue's worker, as wl_event_loop_add_signal() does it:
 * the queue is created first, then the main thread blocks SIGUSR1 and reads it from a signalfd. The
 * signal must arrive there. Had the worker left it unblocked, the kernel could pick the worker to take
 * it, and with the default action the process would die (exit status 138). */
#define _GNU_SOURCE
#include <deferred_unmap/c_api.h>

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/signalfd.h>
#include <unistd.h>

int main(void) {
    du_queue *q = du_queue_create(NULL); /* the default mode starts the worker */
    if (q == NULL || du_queue_worker_fd(q) < 0) {
        fprintf(stderr, "signal_test: no queue with a worker\n");
        return 1;
    }
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    const int sfd = signalfd(-1, &usr1, SFD_CLOEXEC);
    int received = 0;
    for (int i = 0; i < 50 && sfd >= 0; ++i) { /* many tries: the kernel's choice of thread varies */
        kill(getpid(), SIGUSR1);
        struct pollfd p = {sfd, POLLIN, 0};
        struct signalfd_siginfo info;
        if (poll(&p, 1, 1000) == 1 && read(sfd, &info, sizeof info) == (ssize_t)sizeof info && info.ssi_signo == SIGUSR1)
            ++received;
    }
    du_queue_destroy(q);
    if (received != 50) {
        fprintf(stderr, "signal_test: %d of 50 signals reached the signalfd\n", received);
        return 1;
    }
    printf("signal_test: 50 of 50 SIGUSR1 read from the host's signalfd\n");
    return 0;
}

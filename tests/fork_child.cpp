// fork() without exec: the child has no worker thread, and a lock another thread held at the fork
// would stay held. The child's queue must still tear down what it is given and let exit() return.
//
//   test_fork_child close_on_worker|unmap_on_worker   a queue with static storage, real memfds
//   test_fork_child in_flight                         closes the worker held when the process forked
//
// Plain main(): the child runs exit(0), which runs every static destructor, so the check that the
// child's descriptors and mappings are gone is an atexit handler that runs after the queue's.
#include <deferred_unmap/deferred_unmap.hpp>
#include <deferred_unmap/testing.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace du = deferred_unmap;
namespace dt = deferred_unmap::testing;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t pool_bytes = std::size_t{1} << 20;
constexpr int pools = 4;
constexpr auto patience = 5s;  // a hang is a hang; a healthy child exits in milliseconds

int fail(const char* what) {
    std::fprintf(stderr, "FAIL: %s\n", what);
    return 1;
}

// A written memfd pool named so /proc/self/maps shows what is left of it.
du::shm_region make_pool(const char* name) {
    du::unique_fd fd{::memfd_create(name, MFD_CLOEXEC)};
    if (!fd || ::ftruncate(fd.get(), pool_bytes) != 0) std::abort();
    auto map = du::mapping::map(fd.get(), pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED);
    std::memset(map.data(), 1, pool_bytes);
    return du::shm_region{std::move(fd), std::move(map)};
}

bool maps_mention(const char* name) {
    std::ifstream in("/proc/self/maps");
    for (std::string line; std::getline(in, line);)
        if (line.find(name) != std::string::npos) return true;
    return false;
}

// Waits for `child` at most `patience`; kills it when it hangs. Its exit status, or -1 for a hang.
int wait_for(pid_t child, std::chrono::milliseconds& took) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
        int status = 0;
        if (::waitpid(child, &status, WNOHANG) == child) {
            took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        if (std::chrono::steady_clock::now() - start > patience) {
            ::kill(child, SIGKILL);
            ::waitpid(child, &status, 0);
            return -1;
        }
        std::this_thread::sleep_for(1ms);
    }
}

int report(const char* scenario, int status, std::chrono::milliseconds took) {
    if (status == -1) return std::fprintf(stderr, "FAIL: %s: the child hung (killed after 5 s)\n", scenario), 1;
    if (status != 0) return std::fprintf(stderr, "FAIL: %s: the child exited with %d\n", scenario, status), 1;
    std::printf("%s: the child exited cleanly in %lld ms\n", scenario, static_cast<long long>(took.count()));
    return 0;
}

// ---- a queue with static storage, real memfds ----

std::array<int, pools> child_fds{};
bool in_child = false;

du::reclaim_queue& global_queue(bool unmap_on_worker) {
    static du::reclaim_queue queue{{.close_on_worker = !unmap_on_worker, .unmap_on_worker = unmap_on_worker}};
    return queue;
}

// Runs after the queue's destructor (registered before it was built): exit() tore everything down.
void child_left_nothing() {
    if (!in_child) return;
    for (const int fd : child_fds)
        if (::fcntl(fd, F_GETFD) != -1) _exit(3);
    if (maps_mention("du-fork-child")) _exit(4);
}

int static_queue(bool unmap_on_worker) {
    std::atexit(child_left_nothing);
    du::reclaim_queue& queue = global_queue(unmap_on_worker);
    for (int i = 0; i < pools; ++i) queue.push(make_pool("du-fork-parent"));
    while (queue.pending_bytes() > 0) queue.drain(1ms);
    if (!queue.wait_for_worker(patience)) return fail("the parent's worker did not finish");
    const pid_t child = ::fork();
    if (child < 0) return fail("fork");
    if (child == 0) {
        in_child = true;
        for (int i = 0; i < pools; ++i) {
            du::shm_region pool = make_pool("du-fork-child");
            child_fds[static_cast<std::size_t>(i)] = pool.fd();
            queue.push(std::move(pool));
        }
        queue.drain(1ms);  // the worker it would hand closes to is not here
        if (!queue.wait_for_worker(1s)) _exit(5);
        std::exit(0);  // the queue's destructor flushes the rest
    }
    std::chrono::milliseconds took{0};
    const int status = wait_for(child, took);
    // The parent's queue goes on as before.
    queue.push(make_pool("du-fork-parent"));
    queue.flush();
    if (!queue.empty() || maps_mention("du-fork-parent")) return fail("the parent's queue after the fork");
    return report(unmap_on_worker ? "unmap_on_worker" : "close_on_worker", status, took);
}

// ---- closes the worker held when the process forked ----

std::atomic<int> gated_fd{-1};
std::atomic<bool> in_gate{false};
std::atomic<bool> gate_open{false};

// scripted_os whose close of gated_fd waits, outside the script's lock, until the gate opens.
struct gated_os {
    static void* map(void* hint, std::size_t length, int prot, int flags, int fd, off_t offset, int& error) noexcept {
        return dt::scripted_os::map(hint, length, prot, flags, fd, offset, error);
    }
    static int unmap(void* addr, std::size_t length) noexcept { return dt::scripted_os::unmap(addr, length); }
    static int close(int fd) noexcept {
        if (fd == gated_fd) {
            in_gate = true;
            while (!gate_open) std::this_thread::yield();
        }
        return dt::scripted_os::close(fd);
    }
};

int in_flight() {
    auto& os = dt::reset();
    du::basic_reclaim_queue<std::chrono::steady_clock, gated_os> queue;
    std::array<int, 3> fds{};
    for (int& fd : fds) {
        fd = os.open_fd(pool_bytes);
        queue.push(du::basic_unique_fd<gated_os>{fd}, pool_bytes);
    }
    gated_fd = fds[0];
    if (queue.drain(1s).fds_handed_off != 3) return fail("the closes were not handed to the worker");
    while (!in_gate) std::this_thread::sleep_for(1ms);  // the worker is inside the first close
    const pid_t child = ::fork();
    if (child < 0) return fail("fork");
    if (child == 0) {
        queue.flush();  // the two closes still in the worker's ring are made here, the one in hand is not
        if (os.is_open(fds[1]) || os.is_open(fds[2])) _exit(3);
        if (!os.is_open(fds[0])) _exit(4);  // made by the parent's worker, or not at all: never twice
        if (!queue.empty() || queue.stats().items_reclaimed != 3) _exit(5);
        std::exit(0);
    }
    std::chrono::milliseconds took{0};
    const int status = wait_for(child, took);
    gate_open = true;
    queue.flush();
    if (os.open_fds() != 0 || os.misuse() != 0) return fail("the parent's closes after the fork");
    return report("in_flight", status, took);
}

}  // namespace

int main(int argc, char** argv) {
    const std::string scenario = argc > 1 ? argv[1] : "";
    if (scenario == "close_on_worker") return static_queue(false);
    if (scenario == "unmap_on_worker") return static_queue(true);
    if (scenario == "in_flight") return in_flight();
    return fail("usage: test_fork_child close_on_worker|unmap_on_worker|in_flight");
}

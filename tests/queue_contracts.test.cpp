// What a host sees of the queue inside a real compositor: a second thread holding the steps, a
// preempted step, a frame thread that is already late, an idle loop in every mode, the worker's
// signal mask and name, and a burst told back in the stats.
#include <doctest/doctest.h>

#include "test_support.hpp"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/timerfd.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>
#include <thread>

using namespace du_test;
using namespace std::chrono_literals;

namespace {

// Real time, scripted system calls: for the tests where a second thread must really wait.
using real_time_queue = du::basic_reclaim_queue<std::chrono::steady_clock, dt::scripted_os>;

du::cost_model exact(double unmap_rate, double close_rate) { return linear_model(unmap_rate, close_rate, 0ns); }

// The threads of this process named `name`, by task id, once there are `expected` of them or 2 s have
// passed. A worker that an earlier test joined can still be listed for a moment: the kernel wakes
// pthread_join() before it removes the exiting task from /proc/self/task.
std::vector<std::string> tasks_named(const std::string& name, std::size_t expected) {
    std::vector<std::string> ids;
    for (int tries = 0; tries < 2000; ++tries) {
        ids.clear();
        for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
            std::ifstream comm(entry.path() / "comm");
            std::string line;
            std::getline(comm, line);
            if (line == name) ids.push_back(entry.path().filename().string());
        }
        if (ids.size() == expected) break;
        std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
    return ids;
}

// A field of /proc/self/task/<id>/status, e.g. "SigBlk" or "voluntary_ctxt_switches".
std::string task_status(const std::string& id, const std::string& field) {
    std::ifstream status("/proc/self/task/" + id + "/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind(field + ":", 0) == 0) return line.substr(line.find_first_not_of(" \t", field.size() + 1));
    return {};
}

}  // namespace

TEST_CASE("worker: named du-reclaim, every asynchronous signal blocked, the creator's mask unchanged") {
    sigset_t before;
    ::pthread_sigmask(SIG_SETMASK, nullptr, &before);
    du::reclaim_queue q;  // the default mode starts the worker
    q.push(real_pool(std::size_t{1} << 20));
    CHECK(q.drain(1s).fds_handed_off == 1);
    REQUIRE(q.wait_for_worker(10s));  // the worker has made the close: its start-up mask is gone
    REQUIRE(q.stats().worker_steps == 1);
    const auto ids = tasks_named("du-reclaim", 1);
    REQUIRE(ids.size() == 1);
    const unsigned long long blocked = std::stoull(task_status(ids[0], "SigBlk"), nullptr, 16);
    for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD, SIGALRM, SIGPIPE}) {
        CAPTURE(sig);
        CHECK((blocked >> (sig - 1) & 1U) == 1U);
    }
    for (const int sig : {SIGSEGV, SIGBUS}) CHECK((blocked >> (sig - 1) & 1U) == 0U);  // faults stay deliverable
    sigset_t after;
    ::pthread_sigmask(SIG_SETMASK, nullptr, &after);
    for (int sig = 1; sig < 32; ++sig) CHECK(::sigismember(&before, sig) == ::sigismember(&after, sig));
}

TEST_CASE("worker: runs SCHED_OTHER when the thread that made the queue runs SCHED_RR") {
    int creator_error = 0;
    int worker_policy = -1;
    std::thread creator([&] {
        const sched_param realtime{.sched_priority = 1};
        creator_error = ::pthread_setschedparam(::pthread_self(), SCHED_RR, &realtime);
        if (creator_error != 0) return;
        du::reclaim_queue q;
        const auto ids = tasks_named("du-reclaim", 1);
        if (ids.size() == 1) worker_policy = ::sched_getscheduler(std::stoi(ids[0]));
    });
    creator.join();
    if (creator_error == EPERM) {
        MESSAGE("not checked: this process may not run SCHED_RR (needs CAP_SYS_NICE or RLIMIT_RTPRIO)");
        return;
    }
    REQUIRE(creator_error == 0);
    CHECK(worker_policy == SCHED_OTHER);
}

TEST_CASE("worker: a worker that cannot be started leaves a queue that tears down inline") {
    dt::reset();
    const dt::thread_creation_failure no_threads;
    for (const bool unmap_on_worker : {false, true}) {
        CAPTURE(unmap_on_worker);
        real_time_queue q{{.close_on_worker = !unmap_on_worker, .unmap_on_worker = unmap_on_worker}};
        CHECK(q.stats().worker_error == EAGAIN);
        CHECK(q.worker_done_fd() == -1);
        CHECK(tasks_named("du-reclaim", 0).empty());
        q.push(dt::make_region(mib));
        const auto report = q.drain(1s);
        CHECK(report.fds_closed == 1);  // made here: there is no worker to hand it to
        CHECK(report.bytes_unmapped == mib);
        CHECK(q.empty());
        CHECK(q.wait_for_worker(0ns));
    }
    CHECK(dt::script().open_fds() == 0);
}

TEST_CASE("worker: low_priority_closes lowers a close-only worker, never an unmapping one") {
    const auto nice_of_worker = [] {
        const auto ids = tasks_named("du-reclaim", 1);
        REQUIRE(ids.size() == 1);
        return ::getpriority(PRIO_PROCESS, static_cast<id_t>(std::stoi(ids[0])));
    };
    const int own = ::getpriority(PRIO_PROCESS, 0);
    {
        du::reclaim_queue q{{.low_priority_closes = true}};
        for (int spins = 0; spins < 1000 && nice_of_worker() == own; ++spins) std::this_thread::sleep_for(1ms);
        CHECK(nice_of_worker() == 10);
    }
    du::reclaim_queue q{{.unmap_on_worker = true, .low_priority_closes = true}};
    q.push(real_pool(std::size_t{1} << 20));
    q.drain(1ms);
    REQUIRE(q.wait_for_worker(10s));  // the worker has run
    CHECK(nice_of_worker() == own);
}

TEST_CASE("contention: a drain waits at most its budget for a push reclaiming over the cap on another thread") {
    dt::reset();
    // Each munmap really takes 5 ms; the cap forces the pushing thread to unmap 20 of them at once.
    dt::script().cost = [](const dt::os_call& c) {
        if (c.op == call_kind::unmap) std::this_thread::sleep_for(5ms);
        return 0ns;
    };
    real_time_queue q{inline_mode({.unmap_chunk_bytes = mib, .max_pending_bytes = 20 * mib})};
    for (int i = 0; i < 20; ++i) q.push(dt::make_region(mib));  // at the cap, not over it
    std::atomic<bool> pushing{false};
    std::jthread pusher([&] {
        pushing = true;
        q.push(dt::make_region(20 * mib));  // 20 MiB over the cap: 20 steps, ~100 ms under the step lock
    });
    while (!pushing) std::this_thread::yield();
    std::this_thread::sleep_for(10ms);  // the pusher is inside its reclaim
    const auto started = std::chrono::steady_clock::now();
    const du::drain_report report = q.drain(1ms);
    const auto took = std::chrono::steady_clock::now() - started;
    CHECK(report.busy);
    CHECK(report.steps == 0);
    CHECK(report.elapsed >= 1ms);                  // the wait is counted
    CHECK(report.elapsed <= took);
    CHECK(took < 40ms);                            // generous: the old drain waited out the whole reclaim
    pusher.join();
    CHECK(q.stats().busy_drains == 1);
    q.flush();
    CHECK(dt::script().open_fds() == 0);
}

TEST_CASE("contention: stats() and model() do not wait for another thread's steps") {
    dt::reset();
    std::atomic<bool> in_step{false}, release{false};
    dt::script().cost = [&](const dt::os_call& c) {
        if (c.op == call_kind::unmap) {
            in_step = true;
            while (!release) std::this_thread::sleep_for(100us);
        }
        return 0ns;
    };
    real_time_queue q{inline_mode()};
    q.push(dt::make_region(mib));
    std::jthread flusher([&] { q.flush(); });
    while (!in_step) std::this_thread::yield();
    const auto started = std::chrono::steady_clock::now();
    CHECK(q.stats().items_pushed == 1);
    static_cast<void>(q.model());
    CHECK(std::chrono::steady_clock::now() - started < 1s);
    release = true;
}

TEST_CASE("drain_until: never starts a step predicted to end after the deadline, not even a first one") {
    dt::reset().unmap_ns_per_byte = 0.05;  // a 2 MiB munmap: ~105 us
    scripted_queue q{inline_mode(two_mib_steps({.first_step_ns_per_byte = 0.05, .prior = exact(0.05, 0.0)}))};
    q.push(dt::make_region(8 * mib));
    const auto now = dt::manual_clock::now();
    CHECK(q.drain_until(now).steps == 0);              // already due: a late frame thread loses nothing
    CHECK(q.drain_until(now + 100us).steps == 0);      // one step would end at ~105 us
    const auto report = q.drain_until(dt::manual_clock::now() + 250us);
    CHECK(report.steps == 2);
    CHECK(dt::manual_clock::now() <= now + 250us);
    CHECK(q.drain(1ns).steps == 1);                    // drain(budget) keeps its first free step
}

TEST_CASE("drain_until: a close that can never fit still goes, through the idle drain") {
    dt::reset().close_ns_per_byte = 1.0;  // the close of 20 MiB: ~21 ms, longer than any frame
    scripted_queue q{inline_mode({.prior = exact(0.0, 1.0)})};
    q.push(dt::scripted_fd{dt::script().open_fd(20 * mib)}, 20 * mib);
    for (int frame = 0; frame < 5; ++frame) CHECK(q.drain_until(dt::manual_clock::now() + 16ms).steps == 0);
    dt::manual_clock::set(q.next_deadline());  // the idle timer fires
    CHECK(q.drain(4ms).fds_closed == 1);
    CHECK(q.empty());
}

TEST_CASE("drain_until: a frame thread that is always too late does not keep the idle timer away") {
    dt::reset().unmap_ns_per_byte = 0.05;
    scripted_queue q{inline_mode({.max_delay = 50ms, .prior = exact(0.05, 0.0)})};
    q.push(dt::make_region(20 * mib));
    int idle_drains = 0;
    for (int frame = 0; frame < 60 && !q.empty(); ++frame) {
        dt::manual_clock::advance(16ms);
        if (q.next_deadline() <= dt::manual_clock::now()) {  // the idle timer fires
            q.drain(4ms);
            ++idle_drains;
        }
        CHECK(q.drain_until(dt::manual_clock::now()).steps == 0);  // always late: starts nothing
    }
    CHECK(idle_drains > 0);
    CHECK(q.empty());
}

TEST_CASE("cost model: one preempted step costs at most one frame, not ten") {
    auto& os = dt::reset();
    os.unmap_ns_per_byte = 0.05;  // a 2 MiB chunk: ~105 us, nine fit a 1 ms drain
    bool preempt_next = false;
    os.cost = [&](const dt::os_call& c) {
        const auto normal = std::chrono::nanoseconds{static_cast<std::int64_t>(0.05 * static_cast<double>(c.length))};
        if (c.op != call_kind::unmap) return 0ns;
        if (preempt_next) {
            preempt_next = false;
            return std::chrono::nanoseconds{50ms};  // the thread lost the CPU inside munmap
        }
        return normal;
    };
    scripted_queue q{inline_mode(two_mib_steps({.prior = exact(0.05, 0.0)}))};
    for (int i = 0; i < 40; ++i) q.push(dt::make_region(20 * mib));
    CHECK(q.drain(1ms).steps >= 8);
    preempt_next = true;
    CHECK(q.drain(1ms).steps == 1);  // the outlier itself
    for (int frame = 0; frame < 10; ++frame) {
        CAPTURE(frame);
        CHECK(q.drain(1ms).steps >= 6);
    }
}

TEST_CASE("cost model: priors and max_step_deviations that are negative, NaN or infinite are refused") {
    for (const double bad : {-0.1, std::nan(""), std::numeric_limits<double>::infinity()}) {
        CAPTURE(bad);
        du::reclaim_options options;
        options.prior.close_ns_per_byte = bad;
        CHECK(du::validate(options) == std::errc::invalid_argument);
        try {
            scripted_queue q{std::move(options)};
            FAIL("a bad prior was accepted");
        } catch (const std::system_error& e) {
            CHECK(e.code() == std::errc::invalid_argument);
        }
    }
    for (const double bad : {-0.1, std::nan(""), std::numeric_limits<double>::infinity()}) {
        CAPTURE(bad);
        du::reclaim_options deviation;
        deviation.prior.unmap_deviation_ns_per_byte = bad;
        CHECK(du::validate(deviation) == std::errc::invalid_argument);
        du::reclaim_options deviations;
        deviations.max_step_deviations = bad;
        CHECK(du::validate(deviations) == std::errc::invalid_argument);
        CHECK_THROWS_AS(scripted_queue{std::move(deviations)}, std::system_error);
    }
    du::reclaim_options negative_overhead;
    negative_overhead.prior.call_overhead = -1ns;
    CHECK(du::validate(negative_overhead) == std::errc::invalid_argument);
    du::reclaim_options huge_overhead;  // predictions would overflow and wrap to "fits"
    huge_overhead.prior.call_overhead = std::chrono::nanoseconds::max();
    CHECK(du::validate(huge_overhead) == std::errc::invalid_argument);
    CHECK_FALSE(du::validate(du::reclaim_options{}));
}

TEST_CASE("bursts: the queue tells how many pools, how many bytes, how many drains and how long") {
    dt::reset().unmap_ns_per_byte = 0.05;
    scripted_queue q{inline_mode({.prior = exact(0.05, 0.0)})};
    const auto started = dt::manual_clock::now();
    for (int i = 0; i < 5; ++i) q.push(dt::make_region(4 * mib));
    std::uint64_t drains = 0;
    std::chrono::nanoseconds worst{0};
    while (!q.empty()) {
        dt::manual_clock::advance(16ms);  // a frame apart
        const auto report = q.drain(300us);
        worst = std::max(worst, report.elapsed);
        ++drains;
    }
    const auto s = q.stats();
    CHECK(s.bursts == 1);
    CHECK(s.last_burst.items == 5);
    CHECK(s.last_burst.bytes == 20 * mib);
    CHECK(s.last_burst.drains == drains);
    CHECK(s.last_burst.worst_drain == worst);
    CHECK(s.last_burst.duration == dt::manual_clock::now() - started);
    q.push(dt::make_region(mib));
    q.flush();
    CHECK(q.stats().bursts == 2);
    CHECK(q.stats().last_burst.items == 1);
}

TEST_CASE("allocation failure: the new item goes after closes already handed to the worker") {
    auto& os = dt::reset();
    const auto me = std::this_thread::get_id();
    os.cost = [me](const dt::os_call& c) {
        if (c.op == call_kind::close && c.thread != me) std::this_thread::sleep_for(30ms);  // a slow worker
        return 0ns;
    };
    scripted_queue q{{.initial_capacity = 16}};
    std::vector<int> pushed;  // every descriptor, in push order: the order the closes must keep
    for (int i = 0; i < 2; ++i) {
        auto region = dt::make_region(mib);
        pushed.push_back(region.fd());
        q.push(std::move(region));
    }
    CHECK(q.drain(1s).fds_handed_off == 2);  // both closes now wait on the worker
    for (int i = 0; i < 16; ++i) {  // the queue's ring is full; the worker's has room for 14 more
        pushed.push_back(os.open_fd());
        q.push(dt::scripted_fd{pushed.back()});
    }
    dt::scripted_fd last{os.open_fd()};
    pushed.push_back(last.get());
    {
        const dt::allocation_failure no_heap;
        q.push(std::move(last));  // the flush before it cannot hand the last two bare fds off either
    }
    CHECK(q.empty());
    std::vector<int> closed;
    for (const auto& c : os.calls())
        if (c.op == call_kind::close) closed.push_back(c.fd);
    CHECK(closed == pushed);  // the newest last, and none made here before the worker's older ones
    CHECK(os.open_fds() == 0);
    CHECK(os.misuse() == 0);
}

// The loop README and 02_frame_hook show: a timer armed from next_deadline(), the worker's descriptor,
// and nothing else. It must come to an end in every mode.
TEST_CASE("idle: the natural loop finishes in every mode") {
    struct mode {
        const char* name;
        du::reclaim_options options;
    };
    for (const mode& m : {mode{"inline", inline_mode({.max_delay = 5ms})}, mode{"close_on_worker", {.max_delay = 5ms}},
                          mode{"unmap_on_worker", {.max_delay = 5ms, .unmap_on_worker = true}},
                          mode{"low_priority_closes", {.max_delay = 5ms, .low_priority_closes = true}}}) {
        CAPTURE(m.name);
        du::reclaim_queue q{m.options};
        for (int i = 0; i < 6; ++i) q.push(real_pool(std::size_t{2} << 20));
        du::unique_fd timer{::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)};
        int wakeups = 0;
        for (; wakeups < 2000; ++wakeups) {
            q.clear_worker_done();
            if (q.empty()) break;
            itimerspec spec{};
            if (const auto deadline = q.next_deadline(); deadline != du::reclaim_queue::time_point::max()) {
                const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
                spec.it_value = {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
            }
            ::timerfd_settime(timer.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
            pollfd fds[2] = {{timer.get(), POLLIN, 0}, {q.worker_done_fd(), POLLIN, 0}};
            const int ready = ::poll(fds, q.worker_done_fd() >= 0 ? 2 : 1, 5000);  // the watchdog: -1 in a host
            REQUIRE(ready > 0);
            std::uint64_t expirations = 0;
            if (fds[0].revents & POLLIN && ::read(timer.get(), &expirations, sizeof expirations) > 0) q.drain(4ms);
        }
        CHECK(q.empty());
        CHECK(wakeups < 2000);
    }
}

TEST_CASE("idle: wait_for_worker reports when the worker holds nothing") {
    du::reclaim_queue q;
    for (int i = 0; i < 4; ++i) q.push(real_pool(std::size_t{2} << 20));
    while (q.pending_bytes() > 0) q.drain(1ms);
    q.drain(1ms);  // hands the last close on
    CHECK(q.next_deadline() == du::reclaim_queue::time_point::max());
    CHECK(q.wait_for_worker(10s));
    CHECK(q.empty());
    du::reclaim_queue no_worker{inline_mode()};
    CHECK(no_worker.wait_for_worker(0ns));
    CHECK(no_worker.worker_done_fd() == -1);
}

TEST_CASE("unmap_on_worker: a drain with nothing pending does not wake the worker") {
    du::reclaim_queue q{{.unmap_on_worker = true}};
    const auto ids = tasks_named("du-reclaim", 1);
    REQUIRE(ids.size() == 1);
    const auto switches = [&] { return std::stoull(task_status(ids[0], "voluntary_ctxt_switches")); };
    std::this_thread::sleep_for(10ms);  // the worker settles into its wait
    const auto before = switches();
    for (int i = 0; i < 600; ++i) q.drain(1ms);
    CHECK(switches() - before <= 2);
}

TEST_CASE("unmap_on_worker: flush does not wait out the worker's pause") {
    dt::reset();
    // The longest pause a queue takes, after each of 20 munmaps: waited out, at least 190 ms.
    real_time_queue q{{.unmap_on_worker = true, .worker_pause = du::max_worker_pause}};
    for (int i = 0; i < 20; ++i) q.push(dt::make_region(mib));
    q.drain(1ms);
    while (dt::script().count(call_kind::unmap) == 0) std::this_thread::sleep_for(100us);  // the worker is in its pause
    const auto started = std::chrono::steady_clock::now();
    q.flush();
    CHECK(std::chrono::steady_clock::now() - started < 100ms);
    CHECK(q.empty());
    CHECK(dt::script().open_fds() == 0);
}

TEST_CASE("ring: a moved-from ring is empty and takes pushes again") {
    du::detail::ring<int> a;
    for (int i = 0; i < 20; ++i) REQUIRE(a.push_back(i));
    du::detail::ring<int> b{std::move(a)};
    CHECK(b.size() == 20);
    CHECK(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
    for (int i = 0; i < 40; ++i) REQUIRE(a.push_back(i));
    CHECK(a.size() == 40);
    CHECK(a.pop_front() == 0);
    b = std::move(a);
    CHECK(b.size() == 39);
    CHECK(b.pop_front() == 1);
}

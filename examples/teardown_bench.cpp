// teardown_bench: what each way of tearing down wl_shm pools costs, measured side by side.
//
// For each pool size, rounds of bursts: a batch of real memfd pools (client-written, compositor-read,
// 4 KiB pages) dies at once and each strategy tears it down in turn, the order changing every round so
// that drift, and what one strategy leaves behind for the next, hit all alike. Each strategy runs twice
// per round: once alone (syscall times, CPU, frame thread time) and once beside a contention probe, a
// thread doing mmap+touch+munmap in a tight loop (its latency with no teardown is the baseline).
// --firefox-focus adds a client that drops a ~30 MiB buffer every frame for a second. CPU is the
// process's, and beside it the same less what as many frames cost with nothing to tear down (a strategy
// that takes more frames to give memory back wakes more often; a compositor whose screen changes runs
// those frames anyway, an idle one wakes for the queue's idle timer instead).
// A microbenchmark measures the queue's own overhead (no syscalls), and 80 more pools of one size are
// torn down, each with its first call after a frame's sleep and the rest back to back (half of them)
// or each after such a sleep too (the other half), to show what a call costs with caches gone cold.
// 100 more show what a close costs right after its pool's munmap, a frame later (with the caches
// evicted or not), and on another CPU; 60 more what a munmap call costs beyond the pages it frees.
//
// Strategies: close-first (close, then munmap: today's KWin), unmap-first, thread-drop (each pool
// handed whole to one dropping thread: Smithay), queue (drain a budget per frame), queue+worker
// (close_on_worker), queue+worker-unmap (unmap_on_worker), and beside them queue/2MiB and
// queue+worker/2MiB (fixed 2 MiB steps), queue+worker/nice (low_priority_closes), queue+worker/pause
// (drain_pause) and queue+worker/wall (the model learning from wall time). unmap-first/again and
// thread-drop/again run those two once more in the same rounds: each target that is a ratio against
// one of them prints the same ratio between its two runs (A/A), the noise this run puts on it.
//
// Usage: teardown_bench [--quick] [--sizes 1M,20736000,...] [--burst-bytes B] [--rounds N] [--hz N]
//                       [--budget-us N] [--max-step-us N] [--max-step-deviations X]
//                       [--drain-pause-us N] [--firefox-focus]
//                       [--firefox-bytes B] [--firefox-seconds S] [--no-probe] [--carry-model]
//                       [--pool-age-ms N] [--csv FILE] [--json FILE]
#include "bench_common.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <numeric>

// ---- every heap allocation in the process is counted (the overhead bench asserts none) -------------

namespace {
std::atomic<std::uint64_t> g_allocations{0};

void* counted_alloc(std::size_t size) noexcept {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(size == 0 ? 1 : size);
}
}  // namespace

void* operator new(std::size_t size) {
    if (void* p = counted_alloc(size)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size); }
// Out of line: once inlined next to a `new`, g++ would see malloc'd memory reach free() via delete and
// warn (-Wmismatched-new-delete), though replacing both is exactly what the standard allows.
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

using namespace bench;
using std::chrono::microseconds;

struct settings {
    std::vector<std::size_t> sizes{std::size_t{1} << 20, std::size_t{4} << 20, default_pool_bytes,
                                   std::size_t{64} << 20, std::size_t{256} << 20};
    std::size_t burst_bytes = std::size_t{128} << 20;
    std::size_t rounds = 3;
    unsigned hz = 60;
    unsigned budget_us = 1000;
    unsigned max_step_us = static_cast<unsigned>(std::chrono::duration_cast<microseconds>(queue_settings{}.max_step).count());
    double max_step_deviations = queue_settings{}.max_step_deviations;
    unsigned drain_pause_us = static_cast<unsigned>(std::chrono::duration_cast<microseconds>(queue_settings{}.drain_pause).count());
    bool quick = false;
    bool firefox = false;
    std::size_t firefox_bytes = std::size_t{30} << 20;
    double firefox_seconds = 1.0;
    bool no_probe = false;
    bool carry_model = false;
    unsigned pool_age_ms = 0;
    std::string csv, json;

    [[nodiscard]] nanoseconds interval() const { return nanoseconds{1'000'000'000 / hz}; }
    [[nodiscard]] nanoseconds budget() const { return microseconds{budget_us}; }
    [[nodiscard]] queue_settings queue() const {
        return {.budget = budget(), .max_step = microseconds{max_step_us}, .max_step_deviations = max_step_deviations, .drain_pause = microseconds{drain_pause_us}, .prior = {}};
    }
};

settings parse(int argc, char** argv) {
    settings s;
    std::vector<std::size_t> sizes;
    std::size_t burst = 0, rounds = 0;
    arg_parser args{"teardown_bench", "Measures munmap/close cost, CPU, frame-thread time and mmap contention "
                                      "of six ways to tear down wl_shm pools."};
    args.flag("--quick", s.quick, "small run: 2880x1800x4 pools only, 40 MiB bursts, 3 rounds");
    args.sizes("--sizes", sizes, "pool sizes in bytes (suffix K/M/G allowed)");
    args.bytes("--burst-bytes", burst, "bytes of pools dying at once per run (default 128 MiB)");
    args.number("--rounds", rounds, "interleaved rounds per size (default 3)");
    args.number("--hz", s.hz, "frame rate of the drain loop (default 60)");
    args.number("--budget-us", s.budget_us, "drain budget per frame (default 1000)");
    args.number("--max-step-us", s.max_step_us, "max_step of the queued strategies but the 2MiB ones (default 200)");
    args.number("--max-step-deviations", s.max_step_deviations, "max_step_deviations of those strategies: 0 sizes "
                                                                "steps by the mean rate (default 2)");
    args.number("--drain-pause-us", s.drain_pause_us, "queue+worker/pause: sleep between two munmap steps (default 50)");
    args.flag("--firefox-focus", s.firefox, "add the scenario of a client dropping a buffer every frame");
    args.bytes("--firefox-bytes", s.firefox_bytes, "its buffer size (default 30 MiB)");
    args.number("--firefox-seconds", s.firefox_seconds, "how long it drops buffers (default 1)");
    args.flag("--no-probe", s.no_probe, "skip the contention probe runs");
    args.flag("--carry-model", s.carry_model, "each queue starts from the model its strategy's previous burst "
                                              "learned, as a compositor's one queue does; one uncounted burst per "
                                              "strategy and scenario comes first (default: the prior)");
    args.number("--pool-age-ms", s.pool_age_ms, "sleep between making a run's pools and their burst (default 0)");
    args.text("--csv", s.csv, "write the strategy rows as CSV");
    args.text("--json", s.json, "write everything as JSON");
    args.parse(argc, argv);
    if (s.quick) {
        s.sizes = {default_pool_bytes};
        s.burst_bytes = std::size_t{40} << 20;
        s.rounds = 3;
        s.firefox_seconds = 0.25;
    }
    if (!sizes.empty()) s.sizes = sizes;
    if (burst > 0) s.burst_bytes = burst;
    if (rounds > 0) s.rounds = rounds;
    if (s.hz == 0 || s.budget_us == 0 || s.max_step_us == 0) {
        std::fprintf(stderr, "teardown_bench: --hz, --budget-us and --max-step-us must be positive\n");
        std::exit(2);
    }
    check_step_deviations("teardown_bench", s.max_step_deviations);
    return s;
}

// ---- the contention probe ------------------------------------------------------------------------

/// A thread doing mmap + touch + munmap of one anonymous page in a tight loop while a window is open,
/// recording each iteration's latency and the mmap call's alone, the latter also net of the time the
/// probe sat runnable on a run queue (schedstat's run_delay): on two CPUs with three busy threads, a
/// probe woken when mmap_lock comes free may wait a scheduler slice for a CPU, which is not the
/// lock's doing. Parked (no CPU) between windows.
class contention_probe {
public:
    static constexpr std::size_t capacity = std::size_t{4} << 20;  // samples per window

    contention_probe() {
        total_ns_.reserve(capacity);
        mmap_ns_.reserve(capacity);
        mmap_net_ns_.reserve(capacity);
        thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
    }

    /// Clears the samples and starts recording. Frame thread; allocates nothing.
    void begin() {
        std::lock_guard lock(mutex_);
        total_ns_.clear();
        mmap_ns_.clear();
        mmap_net_ns_.clear();
        preempted_ = 0;
        recording_.store(true, std::memory_order_release);
        active_ = true;
        cv_.notify_all();
    }
    /// Stops recording and waits until the probe is parked, so the samples can be read.
    void end() {
        recording_.store(false, std::memory_order_release);
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return !active_; });
    }
    [[nodiscard]] const std::vector<std::uint32_t>& total_ns() const { return total_ns_; }
    [[nodiscard]] const std::vector<std::uint32_t>& mmap_ns() const { return mmap_ns_; }
    /// mmap_ns() less the run-queue wait during each call (equal to it where schedstat is missing).
    [[nodiscard]] const std::vector<std::uint32_t>& mmap_net_ns() const { return mmap_net_ns_; }
    /// Iterations left out because the probe was preempted.
    [[nodiscard]] std::size_t preempted() const { return preempted_; }

private:
    void run(std::stop_token stop) {
        schedstat_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
        std::unique_lock lock(mutex_);
        while (cv_.wait(lock, stop, [this] { return active_; })) {
            lock.unlock();
            last_switches_ = involuntary_switches();
            while (recording_.load(std::memory_order_acquire) && total_ns_.size() < capacity) sample();
            lock.lock();
            active_ = false;
            cv_.notify_all();
        }
        if (schedstat_ >= 0) ::close(schedstat_);
    }

    // This thread's time spent runnable but waiting for a CPU, or zero without schedstat.
    [[nodiscard]] nanoseconds run_delay() const {
        char text[96];
        const ssize_t n = schedstat_ < 0 ? -1 : ::pread(schedstat_, text, sizeof text - 1, 0);
        if (n <= 0) return nanoseconds{0};
        text[n] = '\0';
        char* rest = nullptr;
        std::strtoull(text, &rest, 10);  // on-CPU time first
        return nanoseconds{static_cast<std::int64_t>(std::strtoull(rest, nullptr, 10))};
    }

    // An iteration during which the probe was preempted (an involuntary context switch: another thread
    // wanted its CPU) measures the scheduler, not mmap_lock, so it is counted but not recorded. A wait
    // for mmap_lock sleeps voluntarily and is recorded.
    void sample() {
        const nanoseconds queued_before = run_delay();
        const auto start = steady::now();
        void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        const auto mapped = steady::now();
        const nanoseconds queued = run_delay() - queued_before;
        if (page == MAP_FAILED) die("probe mmap");
        *static_cast<volatile char*>(page) = 1;
        ::munmap(page, 4096);
        const auto end = steady::now();
        const long switches = involuntary_switches();
        if (switches != last_switches_) {
            last_switches_ = switches;
            ++preempted_;
            return;
        }
        total_ns_.push_back(saturate(end - start));
        mmap_ns_.push_back(saturate(mapped - start));
        mmap_net_ns_.push_back(saturate(std::max(mapped - start - queued, nanoseconds{0})));
    }

    static std::uint32_t saturate(nanoseconds d) {
        return static_cast<std::uint32_t>(std::min<std::int64_t>(d.count(), UINT32_MAX));
    }

    std::mutex mutex_;
    std::condition_variable_any cv_;
    bool active_ = false;
    std::atomic<bool> recording_{false};
    std::vector<std::uint32_t> total_ns_, mmap_ns_, mmap_net_ns_;
    int schedstat_ = -1;
    std::size_t preempted_ = 0;
    long last_switches_ = 0;
    std::jthread thread_;
};

// ---- one run: one strategy tearing down one batch --------------------------------------------------

struct scenario {
    std::string name;                  ///< "burst" or "firefox-focus"
    std::size_t pool_bytes = 0;
    std::size_t pools = 0;             ///< pools per run
    std::size_t pools_per_frame = 0;   ///< 0: all at frame 0
    std::size_t rounds = 1;
    bool probe = true;
};

struct run_result {
    call_times calls;
    frame_run frames;
    double cpu_ms = 0;           ///< the whole process's CPU time from the burst until memory was back
    double teardown_cpu_ms = 0;  ///< the same less what as many frames cost with nothing to tear down
    nanoseconds wall{0};  ///< from the burst until everything was back
    std::optional<du::reclaim_stats> queue;  ///< the queued strategies' own totals
};

std::vector<std::vector<pool>> make_batches(const scenario& sc) {
    std::vector<std::vector<pool>> batches;
    if (sc.pools_per_frame == 0) {
        batches.push_back(make_pools(sc.pools, sc.pool_bytes));
        return batches;
    }
    for (std::size_t made = 0; made < sc.pools; made += sc.pools_per_frame)
        batches.push_back(make_pools(std::min(sc.pools_per_frame, sc.pools - made), sc.pool_bytes));
    return batches;
}

/// Tears one batch down with strategy `s`. With a probe, the probe records from the burst until
/// `probe_window` has passed or everything is back, whichever is later, so every strategy's probe
/// sees a stretch of time of the same length.
/// With --carry-model, `model` is the queue's prior on entry and what it learned on return.
run_result run_once(strategy s, const scenario& sc, const settings& cfg, nanoseconds idle_frame_cpu,
                    std::optional<du::cost_model>& model, contention_probe* probe, nanoseconds probe_window = {}) {
    auto batches = make_batches(sc);
    // A compositor's dying pools were mostly last touched long before; by default the burst meets them hot.
    std::this_thread::sleep_for(std::chrono::milliseconds{cfg.pool_age_ms});
    const auto ranges = ranges_of(batches);
    queue_settings queue = cfg.queue();
    if (cfg.carry_model) queue.prior = model;
    auto engine = make_engine(s, queue);
    // Room for steps down to 64 KiB: max_step cuts finer than 2 MiB when munmap runs slow.
    const std::size_t chunks = sc.pool_bytes / (std::size_t{64} << 10) + 2;
    call_log::reset(sc.pools * (chunks + 1) + 64);
    if (probe) probe->begin();
    const auto start = steady::now();
    const auto cpu_before = process_cpu();
    run_result r;
    r.frames = run_frames(*engine, batches, {.interval = cfg.interval()});
    r.cpu_ms = to_ms(process_cpu() - cpu_before);
    r.teardown_cpu_ms = r.cpu_ms - to_ms(idle_frame_cpu * static_cast<std::int64_t>(r.frames.frames.size()));
    r.wall = steady::now() - start;
    if (probe) {
        std::this_thread::sleep_until(start + probe_window);
        probe->end();
    }
    r.calls = collect_calls(ranges, cfg.queue().max_step);
    r.queue = engine->queue_stats();
    model = engine->model();
    return r;
}

// ---- what a strategy accumulates over the rounds ---------------------------------------------------

struct totals {
    std::vector<double> munmap_us, step_us, close_us;        // per pool / per call, all runs
    std::vector<double> munmap_cpu_us, close_cpu_us;         // the same in thread CPU time
    std::vector<double> cpu_per_pool_us, teardown_cpu_per_pool_us, frame_ms, returned, bound, work_ms;  // per run
    std::vector<double> loop_cpu_per_frame_us;                // per run: the frame loop's own CPU, per frame
    std::vector<double> slices_ms, calm_slices_ms;           // frame-thread teardown per frame; not preempted
    double preempted_frames = 0;
    std::vector<double> probe_us, probe_mmap_us, probe_mmap_net_us;  // probe runs
    double probe_preempted = 0;
    std::size_t probe_windows = 0;
    double max_frame_close_us = 0;
    double max_unmap_off_cpu_us = 0;  // probe runs only: what the probe's mmap may have waited for
    bool hit_limit = false;
    du::duration_histogram prediction_error;  // queued strategies: each munmap step's |time - predicted|
    std::size_t unmap_calls = 0, unmap_calls_over_max_step = 0;

    void add(const run_result& r, std::size_t pools, double budget_ms) {
        auto& c = r.calls;
        munmap_us.insert(munmap_us.end(), c.unmap_per_pool_us.begin(), c.unmap_per_pool_us.end());
        step_us.insert(step_us.end(), c.unmap_steps_us.begin(), c.unmap_steps_us.end());
        close_us.insert(close_us.end(), c.close_us.begin(), c.close_us.end());
        munmap_cpu_us.insert(munmap_cpu_us.end(), c.unmap_cpu_per_pool_us.begin(), c.unmap_cpu_per_pool_us.end());
        close_cpu_us.insert(close_cpu_us.end(), c.close_cpu_us.begin(), c.close_cpu_us.end());
        max_frame_close_us = std::max(max_frame_close_us, c.max_frame_close_us);
        cpu_per_pool_us.push_back(r.cpu_ms * 1e3 / static_cast<double>(pools));
        teardown_cpu_per_pool_us.push_back(r.teardown_cpu_ms * 1e3 / static_cast<double>(pools));
        const auto frames = static_cast<double>(std::max<std::size_t>(1, r.frames.frames.size()));
        loop_cpu_per_frame_us.push_back(to_us(r.frames.loop_cpu) / frames);
        double frame_total = 0;
        for (const auto& f : r.frames.frames) {
            frame_total += to_ms(f.teardown);
            slices_ms.push_back(to_ms(f.teardown));
            if (!f.preempted) calm_slices_ms.push_back(to_ms(f.teardown));
            preempted_frames += f.preempted ? 1 : 0;
        }
        frame_ms.push_back(frame_total);
        returned.push_back(static_cast<double>(r.frames.frames_to_return));
        bound.push_back(1.2 * c.work_ms / budget_ms + 2);
        work_ms.push_back(c.work_ms);
        hit_limit = hit_limit || r.frames.hit_limit;
        if (r.queue) prediction_error.merge(r.queue->unmap_prediction_error);
        unmap_calls += c.unmap_calls;
        unmap_calls_over_max_step += c.unmap_calls_over_max_step;
    }

    void add_probe(const contention_probe& probe, const run_result& r) {
        max_unmap_off_cpu_us = std::max(max_unmap_off_cpu_us, r.calls.max_unmap_off_cpu_us);
        for (auto ns : probe.total_ns()) probe_us.push_back(ns / 1e3);
        for (auto ns : probe.mmap_ns()) probe_mmap_us.push_back(ns / 1e3);
        for (auto ns : probe.mmap_net_ns()) probe_mmap_net_us.push_back(ns / 1e3);
        probe_preempted += static_cast<double>(probe.preempted());
        ++probe_windows;
    }
};

void add_summary(row& r, const std::string& prefix, std::vector<double> values, bool p999 = false) {
    const summary s = summarize(values);
    r.push_back({prefix + "_p50_us", s.p50, 1});
    r.push_back({prefix + "_p99_us", s.p99, 1});
    if (p999) r.push_back({prefix + "_p999_us", s.p999, 1});
    r.push_back({prefix + "_max_us", s.max, 1});
}

row key_fields(const scenario& sc, const std::string& strategy_name, std::size_t runs) {
    return {{"scenario", sc.name},
            {"pool_bytes", static_cast<double>(sc.pool_bytes), 0},
            {"pools", static_cast<double>(sc.pools), 0},
            {"runs", static_cast<double>(runs), 0},
            {"strategy", strategy_name}};
}

// How well the model sized the munmap steps: its error per step (the queue's own figure), and the
// munmaps that ran past --max-step-us (200 us by default), counted from the call log for every
// strategy alike (the 2 MiB strategies run with max_step out of the way). Both in thread CPU time.
void add_prediction(row& r, const totals& t) {
    const auto& error = t.prediction_error;
    const bool predicted = error.count() > 0;
    const auto us = [](nanoseconds d) { return static_cast<double>(d.count()) / 1e3; };
    r.push_back({"prediction_error_p50_us", predicted ? us(error.quantile(0.5)) : 0.0, 1});
    r.push_back({"prediction_error_p99_us", predicted ? us(error.quantile(0.99)) : 0.0, 1});
    const double calls = static_cast<double>(t.unmap_calls);
    r.push_back({"steps_over_max_step_pct", calls > 0 ? 100.0 * static_cast<double>(t.unmap_calls_over_max_step) / calls : 0.0, 2});
}

// The probe's latencies. Its p99.9, over the ~30,000 samples of each of a few windows pooled, is set
// by a few dozen slow samples, so how many were slower than 100 us is reported per window beside it
// (the baseline's count is the floor): it tells a strategy that delays many samples from one that
// delays few by as much.
void add_probe_fields(row& r, totals& t) {
    add_summary(r, "probe", t.probe_us, true);
    r.push_back({"probe_mmap_max_us", summarize(t.probe_mmap_us).max, 1});
    r.push_back({"probe_mmap_net_max_us", summarize(t.probe_mmap_net_us).max, 1});
    r.push_back({"unmap_off_cpu_max_us", t.max_unmap_off_cpu_us, 1});
    r.push_back({"probe_samples", static_cast<double>(t.probe_us.size()), 0});
    r.push_back({"probe_preempted", t.probe_preempted, 0});
    const auto slow = std::count_if(t.probe_us.begin(), t.probe_us.end(), [](double us) { return us > 100.0; });
    const double windows = static_cast<double>(std::max<std::size_t>(1, t.probe_windows));
    r.push_back({"probe_over_100us_per_run", static_cast<double>(slow) / windows, 1});
}

row strategy_row(const scenario& sc, strategy s, totals& t, bool with_probe) {
    // Every row carries every field, so scripts need no special cases.
    row r = key_fields(sc, name(s), t.frame_ms.size());
    add_summary(r, "munmap", t.munmap_us);
    add_summary(r, "close", t.close_us);
    add_summary(r, "step", t.step_us);
    r.push_back({"munmap_cpu_p50_us", median_of(t.munmap_cpu_us), 1});
    r.push_back({"close_cpu_p50_us", median_of(t.close_cpu_us), 1});
    const double runs = static_cast<double>(t.frame_ms.size());
    r.push_back({"steps_per_pool", static_cast<double>(t.step_us.size()) / (runs * static_cast<double>(sc.pools)), 1});
    r.push_back({"cpu_per_pool_us", median_of(t.cpu_per_pool_us), 0});
    r.push_back({"teardown_cpu_per_pool_us", median_of(t.teardown_cpu_per_pool_us), 0});
    r.push_back({"loop_cpu_per_frame_us", median_of(t.loop_cpu_per_frame_us), 1});
    r.push_back({"frame_ms_per_run", median_of(t.frame_ms), 2});
    const summary slices = summarize(t.slices_ms);
    r.push_back({"frame_p99_ms", slices.p99, 2});
    r.push_back({"frame_max_ms", slices.max, 2});
    const summary calm = summarize(t.calm_slices_ms);
    r.push_back({"frame_calm_p99_ms", calm.p99, 2});
    r.push_back({"frame_calm_max_ms", calm.max, 2});
    r.push_back({"frames_preempted", t.preempted_frames, 0});
    r.push_back({"max_frame_close_us", t.max_frame_close_us, 0});
    r.push_back({"work_ms_per_run", median_of(t.work_ms), 1});
    r.push_back({"frames_to_return", median_of(t.returned), 0});
    r.push_back({"frames_bound", median_of(t.bound), 0});
    r.push_back({"hit_frame_limit", t.hit_limit ? 1.0 : 0.0, 0});
    add_prediction(r, t);
    if (with_probe) add_probe_fields(r, t);
    return r;
}

row baseline_row(const scenario& sc, totals& t) {
    row r = key_fields(sc, "baseline", t.frame_ms.size());
    add_probe_fields(r, t);  // nothing unmaps beside the probe: its off-CPU figure stays 0
    return r;
}

// ---- a scenario: all strategies, interleaved over the rounds --------------------------------------

/// Which of `n` ways (or strategies) goes `k`th in `round`: positions shifted by `round`, then taken by
/// a stride coprime to `n` that changes every round. A fixed cycle would make each way follow the same
/// one in every round, and meet the machine in the state that one left it in (a worker's closes, a
/// cold cache); a ratio between two ways, even two runs of the same code, would carry that. (Shift and
/// stride apart: `round + k * stride` would keep the last way last in every round when `n` is prime.)
std::size_t nth_in_round(std::size_t round, std::size_t k, std::size_t n) {
    std::size_t coprimes = 0;
    for (std::size_t s = 1; s < n; ++s) coprimes += std::gcd(s, n) == 1 ? 1 : 0;
    std::size_t stride = 1;
    for (std::size_t s = 1, seen = 0; coprimes > 0 && s < n; ++s)
        if (std::gcd(s, n) == 1 && seen++ == round % coprimes) stride = s;
    return (k + round) % n * stride % n;
}

void probe_baseline(contention_probe& probe, totals& t, nanoseconds window) {
    probe.begin();
    std::this_thread::sleep_for(window);
    probe.end();
    t.add_probe(probe, {});
    t.frame_ms.push_back(0);
}

void progress_line(const scenario& sc, std::size_t round, strategy s, const char* phase) {
    progress("%s %.1f MiB: round %zu/%zu, %s%s", sc.name.c_str(), static_cast<double>(sc.pool_bytes) / (1 << 20),
             round + 1, sc.rounds, name(s), phase);
}

/// With --carry-model, one uncounted burst per queued strategy, so that every counted run starts from a
/// model that has seen a burst, as a compositor's queue has after its first.
void warm_up(const scenario& sc, const settings& cfg, nanoseconds idle_frame_cpu,
             std::vector<std::optional<du::cost_model>>& clean, std::vector<std::optional<du::cost_model>>& probed) {
    for (std::size_t i = 0; i < std::size(all_strategies); ++i) {
        if (!has_model(all_strategies[i])) continue;
        progress("%s %.1f MiB: warm-up, %s", sc.name.c_str(), static_cast<double>(sc.pool_bytes) / (1 << 20),
                 name(all_strategies[i]));
        run_once(all_strategies[i], sc, cfg, idle_frame_cpu, clean[i], nullptr);
        probed[i] = clean[i];
    }
}

/// Each round runs every strategy alone, then every strategy beside the probe, in nth_in_round() order.
/// Probe windows last as long as the slowest strategy of the round took to give memory back.
std::vector<row> run_scenario(const scenario& sc, const settings& cfg, nanoseconds idle_frame_cpu, contention_probe* probe) {
    if (!sc.probe) probe = nullptr;
    constexpr std::size_t n = std::size(all_strategies);
    std::vector<totals> clean(n), probed(n);
    // Per strategy, and apart for runs beside the probe: each learns on its own threads and clock.
    std::vector<std::optional<du::cost_model>> clean_models(n), probed_models(n);
    totals baseline;
    const double budget_ms = to_ms(cfg.budget());
    if (cfg.carry_model) warm_up(sc, cfg, idle_frame_cpu, clean_models, probed_models);
    for (std::size_t round = 0; round < sc.rounds; ++round) {
        nanoseconds window{0};
        for (std::size_t k = 0; k < n; ++k) {
            const std::size_t i = nth_in_round(round, k, n);
            progress_line(sc, round, all_strategies[i], "");
            const run_result r = run_once(all_strategies[i], sc, cfg, idle_frame_cpu, clean_models[i], nullptr);
            window = std::max(window, r.wall);
            clean[i].add(r, sc.pools, budget_ms);
        }
        if (!probe) continue;
        for (std::size_t k = 0; k < n; ++k) {
            const std::size_t i = nth_in_round(round, k, n);
            progress_line(sc, round, all_strategies[i], " + probe");
            const run_result r = run_once(all_strategies[i], sc, cfg, idle_frame_cpu, probed_models[i], probe, window);
            probed[i].add(r, sc.pools, budget_ms);
            probed[i].add_probe(*probe, r);
        }
        probe_baseline(*probe, baseline, window);
    }
    progress_done();
    std::vector<row> rows;
    if (probe) rows.push_back(baseline_row(sc, baseline));
    for (std::size_t i = 0; i < n; ++i) {
        clean[i].probe_us = std::move(probed[i].probe_us);
        clean[i].probe_mmap_us = std::move(probed[i].probe_mmap_us);
        clean[i].probe_mmap_net_us = std::move(probed[i].probe_mmap_net_us);
        clean[i].max_unmap_off_cpu_us = probed[i].max_unmap_off_cpu_us;
        clean[i].probe_windows = probed[i].probe_windows;
        rows.push_back(strategy_row(sc, all_strategies[i], clean[i], probe != nullptr));
    }
    return rows;
}

std::vector<scenario> scenarios(const settings& cfg) {
    std::vector<scenario> out;
    for (std::size_t bytes : cfg.sizes)
        out.push_back({"burst", bytes, std::clamp<std::size_t>(cfg.burst_bytes / bytes, 1, 256), 0, cfg.rounds, true});
    if (cfg.firefox) {
        const auto frames = static_cast<std::size_t>(std::max(1.0, cfg.firefox_seconds * cfg.hz));
        // One round, no probe: a second of 30 MiB buffers is ~1.8 GB of fresh pages to populate per run.
        out.push_back({"firefox-focus", cfg.firefox_bytes, frames, 1, 1, false});
    }
    return out;
}

// ---- library overhead: the queue with system calls that cost nothing -------------------------------

/// An Os whose calls do nothing, so what drain costs is the library's own bookkeeping.
struct null_os {
    static void* map(void*, std::size_t, int, int, int, off_t, int& error) noexcept {
        error = ENOSYS;
        return MAP_FAILED;
    }
    static int unmap(void*, std::size_t) noexcept { return 0; }
    static int close(int) noexcept { return 0; }
};

/// null_os plus the thread CPU clock posix_os offers: the queue then reads that clock around every
/// step to learn from CPU time, and this Os measures what those reads add to a step.
struct null_cpu_os : null_os {
    static std::chrono::nanoseconds thread_cpu_time() noexcept { return du::posix_os::thread_cpu_time(); }
};

/// What one steady_clock::now() costs here (median of batches): a push into an idle queue reads the
/// clock once, each drain step once.
double clock_read_ns() {
    constexpr int batches = 64, reads = 1 << 14;
    std::vector<double> per_read;
    std::int64_t sink = 0;
    for (int b = 0; b < batches; ++b) {
        const auto start = steady::now();
        for (int i = 0; i < reads; ++i) sink += steady::now().time_since_epoch().count() & 1;
        per_read.push_back(static_cast<double>((steady::now() - start).count()) / reads);
    }
    static std::atomic<std::int64_t> keep{0};
    keep.store(sink, std::memory_order_relaxed);  // the reads must happen
    return median_of(per_read);
}

/// Push and drain of `items` fake pools per round; the median round is kept, so a round in which the
/// thread was preempted by other load does not count.
template <class Os>
row measure_overhead_with() {
    using region = du::basic_shm_region<Os>;
    constexpr std::size_t items = 256, rounds = 400, item_bytes = std::size_t{4} << 20;
    du::basic_reclaim_queue<steady, Os> queue{{.close_on_worker = false, .initial_capacity = items}};
    std::vector<region> regions;
    regions.reserve(items);
    std::vector<double> push_ns, step_ns, steps_per_item;
    push_ns.reserve(rounds);
    step_ns.reserve(rounds);
    steps_per_item.reserve(rounds);
    auto* const base = reinterpret_cast<std::byte*>(std::uintptr_t{1} << 44);
    std::uint64_t allocations = 0;
    for (std::size_t round = 0; round <= rounds; ++round) {  // round 0 warms up
        regions.clear();
        for (std::size_t i = 0; i < items; ++i) {
            std::error_code ec;
            auto view = du::basic_mapping<Os>::adopt(base + i * 2 * item_bytes, item_bytes, ec);
            regions.emplace_back(du::basic_unique_fd<Os>{static_cast<int>(1000 + i)}, std::move(view));
        }
        const auto allocs_before = g_allocations.load(std::memory_order_relaxed);
        const auto t0 = steady::now();
        for (auto& r : regions) queue.push(std::move(r));
        const auto t1 = steady::now();
        const auto report = queue.drain(std::chrono::seconds{10});
        const auto t2 = steady::now();
        const auto allocs_after = g_allocations.load(std::memory_order_relaxed);
        if (round == 0) continue;
        allocations += allocs_after - allocs_before;
        push_ns.push_back(static_cast<double>((t1 - t0).count()) / items);
        step_ns.push_back(static_cast<double>((t2 - t1).count()) / static_cast<double>(report.steps));
        steps_per_item.push_back(static_cast<double>(report.steps) / items);
    }
    return {{"push_ns", median_of(push_ns), 1},
            {"clock_read_ns", clock_read_ns(), 1},
            {"step_ns", median_of(step_ns), 1},
            {"steps_per_item", median_of(steps_per_item), 1},
            {"allocations_per_push_and_drain", static_cast<double>(allocations) / (items * rounds), 3}};
}

// ---- the frame loop with nothing to tear down ----------------------------------------------------

/// The frame thread's CPU per frame when no pool dies: its wake-up each vblank and the loop itself.
/// Teardown CPU takes this out once per frame a strategy ran, the same for every strategy, so CPU
/// the kernel charges to the frame thread later for a teardown (deferred frees) still counts.
nanoseconds measure_idle_frame_cpu(const settings& cfg) {
    constexpr std::size_t frames = 120;
    auto engine = make_engine(strategy::unmap_first, cfg.queue());
    std::vector<std::vector<pool>> nothing;
    const frame_run run = run_frames(*engine, nothing, {.interval = cfg.interval(), .tail_frames = frames - 1});
    return run.loop_cpu / static_cast<std::int64_t>(std::max<std::size_t>(1, run.frames.size()));
}

// ---- cold steps: what a call costs after the thread slept a frame ---------------------------------

/// CPU time per pool of a teardown in `steps` munmaps and a close: each pool's first call after a
/// frame interval's sleep, then the rest back to back (unmap-first, or one drain doing a whole pool)
/// or each after such a sleep too (a queue spreading a pool over frames). The difference, per call
/// after the first, is what a call pays for caches and TLBs gone cold while the thread slept. Every
/// pool is made before any is torn down, and the two ways alternate, so both see pools alike.
row measure_cold_steps(std::size_t bytes, std::size_t steps, nanoseconds interval) {
    constexpr std::size_t pools_each = 40;
    const std::size_t page = du::detail::page_size();
    std::vector<pool> pools = make_pools(2 * pools_each, bytes);
    std::vector<double> warm_us, cold_us;
    for (std::size_t i = 0; i < pools.size(); ++i) {
        const bool cold = i % 2 == 1;
        auto parts = pools[i].release();
        const std::span<std::byte> range = parts.map.release();
        const std::size_t step = (range.size() / steps + page - 1) / page * page;
        nanoseconds cpu{0};
        bool first = true;
        const auto timed = [&](auto call) {
            if (cold || first) std::this_thread::sleep_for(interval);
            first = false;
            const nanoseconds start = cpu_clock(CLOCK_THREAD_CPUTIME_ID);
            const int result = call();
            cpu += cpu_clock(CLOCK_THREAD_CPUTIME_ID) - start;
            if (result != 0) die("cold steps: munmap or close");
        };
        for (std::size_t at = 0; at < range.size(); at += step)
            timed([&] { return ::munmap(range.data() + at, std::min(step, range.size() - at)); });
        timed([&] { return ::close(parts.fd.release()); });
        (cold ? cold_us : warm_us).push_back(to_us(cpu));
    }
    const double warm = median_of(warm_us), cold = median_of(cold_us);
    return {{"pool_bytes", static_cast<double>(bytes), 0}, {"steps", static_cast<double>(steps), 0},
            {"warm_cpu_per_pool_us", warm, 1}, {"cold_cpu_per_pool_us", cold, 1},
            {"cold_cost_per_call_us", (cold - warm) / static_cast<double>(steps), 1}};
}

// ---- close locality: what a close costs where and when it runs ------------------------------------

/// Two CPUs of `allowed`, or one twice on a single-CPU machine.
std::pair<int, int> two_cpus(const cpu_set_t& allowed) {
    std::vector<int> cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu)
        if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
    if (cpus.empty()) throw std::runtime_error("close locality: no CPU in this thread's affinity mask");
    return {cpus.front(), cpus.back()};
}

void pin_to(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (::sched_setaffinity(0, sizeof one, &one) != 0) die("sched_setaffinity");
}

/// Keeps the calling thread's affinity mask and gives it back on every way out.
class affinity_scope {
public:
    affinity_scope() {
        CPU_ZERO(&before_);
        if (::sched_getaffinity(0, sizeof before_, &before_) != 0) die("sched_getaffinity");
    }
    ~affinity_scope() { ::sched_setaffinity(0, sizeof before_, &before_); }
    affinity_scope(const affinity_scope&) = delete;
    affinity_scope& operator=(const affinity_scope&) = delete;

    [[nodiscard]] const cpu_set_t& allowed() const { return before_; }

private:
    cpu_set_t before_;
};

/// Closes descriptors handed to it on a thread pinned to `cpu`, as close_on_worker's worker does (which
/// is not pinned), and reports each close's CPU time; the thread's wake-up is not counted.
class pinned_closer {
public:
    explicit pinned_closer(int cpu) : thread_([this, cpu](std::stop_token stop) { run(stop, cpu); }) {}

    /// Hands `fd` over and waits for its close; returns the close's thread CPU time.
    nanoseconds close(int fd) {
        std::unique_lock lock(mutex_);
        fd_ = fd;
        cv_.notify_all();
        cv_.wait(lock, [this] { return fd_ < 0; });
        return took_;
    }

private:
    void run(std::stop_token stop, int cpu) {
        pin_to(cpu);
        std::unique_lock lock(mutex_);
        while (cv_.wait(lock, stop, [this] { return fd_ >= 0; })) {
            const nanoseconds start = cpu_clock(CLOCK_THREAD_CPUTIME_ID);
            if (::close(fd_) != 0) die("close locality: close");
            took_ = cpu_clock(CLOCK_THREAD_CPUTIME_ID) - start;
            fd_ = -1;
            cv_.notify_all();
        }
    }

    std::mutex mutex_;
    std::condition_variable_any cv_;
    int fd_ = -1;
    nanoseconds took_{0};
    std::jthread thread_;  // last: started once the members it uses exist
};

/// Writes a buffer twice the last-level cache (64 MiB where unknown, 256 MiB at most), so that what a
/// close touches next comes from memory: a stand-in for the work that runs between a plain queue's
/// munmap and its close (the next pool's munmap, a frame's rendering).
class cache_evictor {
public:
    cache_evictor() : buffer_(bytes()) {}
    void run() {
        volatile std::byte* at = buffer_.data();
        for (std::size_t i = 0; i < buffer_.size(); i += 64) at[i] = static_cast<std::byte>(i >> 6);
    }

private:
    static std::size_t bytes() {
        const long last_level = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (last_level <= 0) return std::size_t{64} << 20;
        return std::min(2 * static_cast<std::size_t>(last_level), std::size_t{256} << 20);
    }
    std::vector<std::byte> buffer_;
};

/// CPU time of a pool's close after its munmap four ways: at once on the same thread (one drain doing
/// a whole pool, or unmap-first); a frame interval later; a frame later with the caches evicted in
/// between (a plain queue's close that waits for the next drain while other work runs); and at once
/// on a thread pinned to another CPU (close_on_worker). The measuring thread stays pinned meanwhile;
/// the four ways take turns in nth_in_round() order. Every pool is made first: about 2 GiB at the
/// default pool size.
row measure_close_locality(std::size_t bytes, nanoseconds interval) {
    constexpr std::size_t ways = 4, pools_each = 25;
    const affinity_scope affinity;
    const auto [here, there] = two_cpus(affinity.allowed());
    pin_to(here);
    std::vector<pool> pools = make_pools(ways * pools_each, bytes);
    std::vector<double> us[ways];
    cache_evictor evictor;
    pinned_closer closer{there};
    for (std::size_t i = 0; i < pools.size(); ++i) {
        const std::size_t way = nth_in_round(i / ways, i % ways, ways);
        auto parts = pools[i].release();
        const std::span<std::byte> range = parts.map.release();
        if (::munmap(range.data(), range.size()) != 0) die("close locality: munmap");
        const int fd = parts.fd.release();
        if (way == 3) {
            us[way].push_back(to_us(closer.close(fd)));
            continue;
        }
        if (way >= 1) std::this_thread::sleep_for(interval);
        if (way == 2) evictor.run();
        const nanoseconds start = cpu_clock(CLOCK_THREAD_CPUTIME_ID);
        if (::close(fd) != 0) die("close locality: close");
        us[way].push_back(to_us(cpu_clock(CLOCK_THREAD_CPUTIME_ID) - start));
    }
    return {{"pool_bytes", static_cast<double>(bytes), 0},
            {"close_at_once_cpu_us", median_of(us[0]), 1},
            {"close_a_frame_later_cpu_us", median_of(us[1]), 1},
            {"close_after_eviction_cpu_us", median_of(us[2]), 1},
            {"close_on_other_cpu_cpu_us", median_of(us[3]), 1},
            {"other_cpu", here != there ? 1.0 : 0.0, 0}};
}

// ---- call cost: what a munmap call costs beyond the pages it frees --------------------------------

/// `bytes` / `parts`, rounded up to whole pages: one step of a pool cut into `parts`.
std::size_t part_bytes(std::size_t bytes, std::size_t parts) {
    const std::size_t page = du::detail::page_size();
    return (bytes / parts + page - 1) / page * page;
}

/// A pool mapped again as separate mappings, inside a reserved range that also holds the PROT_NONE
/// pages between them.
struct mapped_pieces {
    std::vector<std::span<std::byte>> maps;
    std::span<std::byte> reserved;
};

/// `bytes` of `fd` mapped again, read-only with its page tables filled (as the compositor's read
/// mapping is), as `pieces` mappings with a PROT_NONE page between each, so that the kernel cannot
/// merge them into one VMA.
mapped_pieces map_pieces(int fd, std::size_t bytes, std::size_t pieces) {
    const std::size_t page = du::detail::page_size();
    const std::size_t step = part_bytes(bytes, pieces);
    const std::size_t reserved = bytes + (bytes + step - 1) / step * page;
    void* base = ::mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) die("call cost: mmap (reserve)");
    mapped_pieces out{{}, {static_cast<std::byte*>(base), reserved}};
    auto* at = static_cast<std::byte*>(base);
    for (std::size_t offset = 0; offset < bytes; offset += step, at += step + page) {
        const std::size_t length = std::min(step, bytes - offset);
        if (::mmap(at, length, PROT_READ, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, static_cast<off_t>(offset)) == MAP_FAILED)
            die("call cost: mmap (piece)");
        out.maps.emplace_back(at, length);
    }
    return out;
}

/// CPU time of munmapping a pool three ways, back to back on one pinned CPU: in one call; in `calls`
/// calls on one mapping, each but the last splitting its VMA (a queue's steps, as one drain makes
/// them); and in `calls` calls each removing a mapping of its own (no split). The differences, per
/// call after the first, are what a call and a split cost beyond the pages freed: what cutting a
/// pool into steps adds, with no sleep and no other CPU involved. The ways take turns in
/// nth_in_round() order; every pool is made first (about 1.2 GiB at the default pool size).
row measure_call_cost(std::size_t bytes, std::size_t calls) {
    constexpr std::size_t ways = 3, pools_each = 20;
    const affinity_scope affinity;
    pin_to(two_cpus(affinity.allowed()).first);
    std::vector<pool> pools = make_pools(ways * pools_each, bytes);
    std::vector<double> us[ways];
    for (std::size_t i = 0; i < pools.size(); ++i) {
        const std::size_t way = nth_in_round(i / ways, i % ways, ways);
        auto parts = pools[i].release();
        const std::span<std::byte> original = parts.map.release();
        const mapped_pieces pieces = map_pieces(parts.fd.get(), original.size(), way == 2 ? calls : 1);
        if (::munmap(original.data(), original.size()) != 0) die("call cost: munmap (original)");
        const std::size_t step = way == 1 ? part_bytes(original.size(), calls) : original.size();
        const nanoseconds start = cpu_clock(CLOCK_THREAD_CPUTIME_ID);
        for (const auto piece : pieces.maps)
            for (std::size_t at = 0; at < piece.size(); at += step)
                if (::munmap(piece.data() + at, std::min(step, piece.size() - at)) != 0) die("call cost: munmap");
        us[way].push_back(to_us(cpu_clock(CLOCK_THREAD_CPUTIME_ID) - start));
        if (::munmap(pieces.reserved.data(), pieces.reserved.size()) != 0) die("call cost: munmap (guard pages)");
    }
    const double one = median_of(us[0]), split = median_of(us[1]), separate = median_of(us[2]);
    const auto per_call = [calls](double extra) { return calls > 1 ? extra / static_cast<double>(calls - 1) : 0.0; };
    return {{"pool_bytes", static_cast<double>(bytes), 0}, {"calls", static_cast<double>(calls), 0},
            {"one_call_cpu_us", one, 1}, {"split_calls_cpu_us", split, 1}, {"separate_calls_cpu_us", separate, 1},
            {"cost_per_extra_call_us", per_call(separate - one), 1}, {"cost_per_split_us", per_call(split - separate), 1}};
}

/// The library's own overhead (null_os: the bookkeeping target), and beside it the step cost with the
/// thread CPU clock reads posix_os makes, since a real queue pays those too.
row measure_overhead() {
    row overhead = measure_overhead_with<null_os>();
    const row with_cpu_clock = measure_overhead_with<null_cpu_os>();
    overhead.push_back({"step_ns_with_cpu_clock", number(&with_cpu_clock, "step_ns"), 1});
    return overhead;
}

// ---- targets --------------------------------------------------------------------------------------

const row* find_row(const std::vector<row>& rows, std::size_t bytes, std::string_view strategy_name) {
    for (const auto& r : rows)
        if (text(r, "scenario") == "burst" && text(r, "strategy") == strategy_name &&
            number(&r, "pool_bytes") == static_cast<double>(bytes))
            return &r;
    return nullptr;
}

/// The pool size the targets are read at: the default one, or the first size run.
std::size_t target_pool_bytes(const settings& cfg) {
    const bool has_default = std::find(cfg.sizes.begin(), cfg.sizes.end(), default_pool_bytes) != cfg.sizes.end();
    return has_default ? default_pool_bytes : cfg.sizes.front();
}

/// The targets this tool measures, at target_pool_bytes().
std::vector<row> targets(const std::vector<row>& rows, const row& overhead, const settings& cfg) {
    const std::size_t bytes = target_pool_bytes(cfg);
    const auto at = [&](std::string_view s) { return find_row(rows, bytes, s); };
    const auto ratio = [&](std::string_view a, std::string_view b, std::string_view field) { return number(at(a), field) / number(at(b), field); };
    // One run of a baseline is one draw of the machine's noise; its second run shows how wide that is.
    const auto against = [&](std::string what, std::string_view s, strategy baseline, std::string_view field, double limit) {
        const char* base = name(baseline);
        return with_control(target(std::move(what), ratio(s, base, field), limit), ratio(name(control_of(baseline).value()), base, field));
    };
    const double budget_ms = to_ms(cfg.budget());
    std::vector<row> out;
    out.push_back(target("munmap p50 unmap-first / close-first", ratio("unmap-first", "close-first", "munmap_p50_us"), 0.4));
    out.push_back(target("munmap cpu p50 unmap-first / close-first", ratio("unmap-first", "close-first", "munmap_cpu_p50_us"), 0.4));
    out.push_back(against("cpu queue / unmap-first", "queue", strategy::unmap_first, "cpu_per_pool_us", 1.10));
    // The same less what its frames cost with nothing to tear down: the queue runs more frames before
    // memory is back than unmap-first's one, and each vblank wake-up costs CPU that a compositor whose
    // screen changes spends anyway (an idle one wakes for the idle timer's drains instead).
    out.push_back(against("teardown cpu queue / unmap-first", "queue", strategy::unmap_first, "teardown_cpu_per_pool_us", 1.10));
    out.push_back(target("cpu queue / queue/2MiB", ratio("queue", "queue/2MiB", "cpu_per_pool_us"), 1.0));
    out.push_back(target("cpu queue+worker / queue+worker/2MiB", ratio("queue+worker", "queue+worker/2MiB", "cpu_per_pool_us"), 1.0));
    out.push_back(target("queue+worker frame p99 ms", number(at("queue+worker"), "frame_p99_ms"), 1.25 * budget_ms));
    out.push_back(target("queue+worker frame max ms", number(at("queue+worker"), "frame_max_ms"), 2 * budget_ms));
    out.push_back(target("queue+worker frame p99 ms, not preempted", number(at("queue+worker"), "frame_calm_p99_ms"), 1.25 * budget_ms));
    out.push_back(target("queue+worker frame max ms, not preempted", number(at("queue+worker"), "frame_calm_max_ms"), 2 * budget_ms));
    const double largest_step = std::max(budget_ms, number(at("queue"), "max_frame_close_us") / 1e3);
    out.push_back(target("queue frame max ms", number(at("queue"), "frame_max_ms"), 1.25 * largest_step));
    out.push_back(target("queue frame max ms, not preempted", number(at("queue"), "frame_calm_max_ms"), 1.25 * largest_step));
    for (const char* q : {"queue", "queue+worker", "queue+worker-unmap"})
        out.push_back(target(std::string(q) + " frames to return", number(at(q), "frames_to_return"), number(at(q), "frames_bound")));
    out.push_back(target("push ns", number(&overhead, "push_ns"), 50));
    out.push_back(target("bookkeeping per step ns", number(&overhead, "step_ns"), 200));
    out.push_back(target("allocations per push+drain", number(&overhead, "allocations_per_push_and_drain"), 0));
    for (const char* off_thread : {"thread-drop", "queue+worker-unmap"})
        out.push_back(target(std::string(off_thread) + " frame-thread ms per burst", number(at(off_thread), "frame_ms_per_run"), 0.1));
    if (!cfg.no_probe) {
        out.push_back(against("probe p99.9 queue / unmap-first", "queue", strategy::unmap_first, "probe_p999_us", 1.0));
        for (const char* q : {"queue+worker", "queue+worker/nice", "queue+worker/pause", "queue+worker-unmap"})
            out.push_back(against(std::string("probe mmap max ") + q + " / thread-drop", q, strategy::thread_drop, "probe_mmap_max_us", 1.0 / 3));
        for (const char* q : {"queue+worker", "queue+worker/nice", "queue+worker/pause"})
            out.push_back(against(std::string("same, net of run-queue wait, ") + q, q, strategy::thread_drop, "probe_mmap_net_max_us", 1.0 / 3));
        out.push_back(target("probe p99.9 queue / queue/2MiB", ratio("queue", "queue/2MiB", "probe_p999_us"), 1.0));
    }
    return out;
}

// ---- output ---------------------------------------------------------------------------------------

std::vector<row> having(const std::vector<row>& rows, std::string_view field_name) {
    std::vector<row> out;
    std::copy_if(rows.begin(), rows.end(), std::back_inserter(out), [&](const row& r) { return find_field(r, field_name) != nullptr; });
    return out;
}

std::vector<row> queued(const std::vector<row>& rows) {
    std::vector<row> out;
    std::copy_if(rows.begin(), rows.end(), std::back_inserter(out), [](const row& r) { return text(r, "strategy").starts_with("queue"); });
    return out;
}

void print_results(const std::vector<row>& rows, const row& overhead, const std::vector<row>& goals, const settings& cfg) {
    const bool probe = !cfg.no_probe;
    std::printf("\nteardown (us per pool, wall time unless marked cpu; munmap summed over a pool's chunks; step = one munmap call):\n");
    const auto teardown_rows = having(rows, "munmap_p50_us");
    print_table(stdout, teardown_rows, {{"scenario", "scenario"}, {"pool_bytes", "bytes"}, {"pools", "pools"}, {"strategy", "strategy"},
                               {"munmap_p50_us", "munmap p50"}, {"munmap_p99_us", "p99"}, {"munmap_max_us", "max"},
                               {"close_p50_us", "close p50"}, {"close_p99_us", "p99"}, {"close_max_us", "max"},
                               {"step_p50_us", "step p50"}, {"step_max_us", "max"}, {"steps_per_pool", "steps"},
                               {"munmap_cpu_p50_us", "munmap cpu p50"}, {"close_cpu_p50_us", "close cpu p50"},
                               {"cpu_per_pool_us", "cpu/pool"}, {"teardown_cpu_per_pool_us", "less frame loop"}});
    std::printf("\nframe thread (ms; calm: frames in which it was not preempted) and memory back (frames):\n");
    print_table(stdout, teardown_rows, {{"scenario", "scenario"}, {"pool_bytes", "bytes"}, {"strategy", "strategy"},
                               {"frame_ms_per_run", "total/run"}, {"frame_p99_ms", "p99/frame"}, {"frame_max_ms", "worst"},
                               {"frame_calm_p99_ms", "calm p99"}, {"frame_calm_max_ms", "calm worst"}, {"frames_preempted", "preempted"},
                               {"work_ms_per_run", "work/run"}, {"frames_to_return", "frames back"}, {"frames_bound", "bound"}});
    std::printf("\nstep sizing (queued strategies, max_step %u us): munmap steps in wall time (us); the model's error "
                "per step and the steps past max_step in thread CPU time (error quantiles are histogram bounds):\n",
                cfg.max_step_us);
    print_table(stdout, queued(teardown_rows), {{"scenario", "scenario"}, {"pool_bytes", "bytes"}, {"strategy", "strategy"},
                               {"step_p50_us", "step p50"}, {"step_p99_us", "p99"}, {"steps_per_pool", "steps/pool"},
                               {"prediction_error_p50_us", "|error| p50"}, {"prediction_error_p99_us", "p99"},
                               {"steps_over_max_step_pct", "% over max_step"}});
    if (probe) {
        std::printf("\ncontention probe: mmap+touch+munmap latency (us) during each strategy:\n");
        print_table(stdout, having(rows, "probe_p50_us"), {{"scenario", "scenario"}, {"pool_bytes", "bytes"}, {"strategy", "strategy"},
                                   {"probe_p50_us", "p50"}, {"probe_p99_us", "p99"}, {"probe_p999_us", "p99.9"},
                                   {"probe_max_us", "max"}, {"probe_mmap_max_us", "mmap max"}, {"probe_mmap_net_max_us", "net of run queue"},
                                   {"unmap_off_cpu_max_us", "munmap off-cpu max"}, {"probe_over_100us_per_run", "over 100 us/run"},
                                   {"probe_samples", "samples"}, {"probe_preempted", "preempted"}});
    }
    std::printf("\nlibrary overhead (Os calls cost nothing): push %.1f ns, bookkeeping %.1f ns per drain step "
                "(%.1f ns with posix_os's thread CPU clock reads), %.3f allocations per push+drain; one "
                "steady_clock::now() costs %.1f ns here\n",
                number(&overhead, "push_ns"), number(&overhead, "step_ns"), number(&overhead, "step_ns_with_cpu_clock"),
                number(&overhead, "allocations_per_push_and_drain"), number(&overhead, "clock_read_ns"));
    print_targets(goals);
}

void print_cold_steps(const row& cold) {
    std::printf("\ncold calls (CPU time per %.0f-byte pool torn down in %.0f munmaps and a close, the first after a "
                "frame's sleep): %.1f us with the rest back to back, %.1f us with a frame's sleep before each: "
                "%.1f us more per call\n",
                number(&cold, "pool_bytes"), number(&cold, "steps"), number(&cold, "warm_cpu_per_pool_us"),
                number(&cold, "cold_cpu_per_pool_us"), number(&cold, "cold_cost_per_call_us"));
}

void print_call_cost(const row& cost) {
    std::printf("munmap calls (CPU time per %.0f-byte pool, p50, back to back on one CPU): %.1f us in one call, %.1f us "
                "in %.0f calls of separate mappings (%.1f us more a call), %.1f us in %.0f calls splitting one mapping "
                "(%.1f us more a split)\n",
                number(&cost, "pool_bytes"), number(&cost, "one_call_cpu_us"), number(&cost, "separate_calls_cpu_us"),
                number(&cost, "calls"), number(&cost, "cost_per_extra_call_us"), number(&cost, "split_calls_cpu_us"),
                number(&cost, "calls"), number(&cost, "cost_per_split_us"));
}

void print_close_locality(const row& close) {
    const double at_once = number(&close, "close_at_once_cpu_us");
    const auto times = [at_once](double us) { return at_once > 0 ? us / at_once : 0.0; };
    const double later = number(&close, "close_a_frame_later_cpu_us");
    const double evicted = number(&close, "close_after_eviction_cpu_us");
    const double other = number(&close, "close_on_other_cpu_cpu_us");
    std::printf("close after its pool's munmap (CPU time, %.0f-byte pool, p50): %.1f us at once, %.1f us a frame later "
                "(%.2fx), %.1f us a frame later with the caches evicted (%.2fx), %.1f us at once on %s (%.2fx)\n",
                number(&close, "pool_bytes"), at_once, later, times(later), evicted, times(evicted), other,
                number(&close, "other_cpu") > 0 ? "another CPU" : "another thread (one CPU only)", times(other));
}

}  // namespace

int main(int argc, char** argv) {
    const settings cfg = parse(argc, argv);
    const row machine = machine_info();
    print_machine(machine);
    std::printf("budget %u us per frame at %u Hz; max_step %u us at %g deviations; drain_pause (queue+worker/pause) %u us; "
                "%zu rounds; bursts of %.0f MiB; each queue starts from %s\n", cfg.budget_us, cfg.hz, cfg.max_step_us,
                cfg.max_step_deviations, cfg.drain_pause_us,
                cfg.rounds, static_cast<double>(cfg.burst_bytes) / (1 << 20),
                cfg.carry_model ? "what its strategy's previous burst learned" : "the prior");
    const row overhead = measure_overhead();
    const row cold_steps = measure_cold_steps(target_pool_bytes(cfg), 3, cfg.interval());
    const row close_locality = measure_close_locality(target_pool_bytes(cfg), cfg.interval());
    const row call_cost = measure_call_cost(target_pool_bytes(cfg), 5);
    const nanoseconds idle_frame_cpu = measure_idle_frame_cpu(cfg);
    std::unique_ptr<contention_probe> probe;
    if (!cfg.no_probe) probe = std::make_unique<contention_probe>();
    std::vector<row> rows;
    for (const auto& sc : scenarios(cfg)) {
        auto part = run_scenario(sc, cfg, idle_frame_cpu, probe.get());
        rows.insert(rows.end(), part.begin(), part.end());
    }
    probe.reset();
    const auto goals = targets(rows, overhead, cfg);
    print_results(rows, overhead, goals, cfg);
    const row frame_loop{{"idle_frame_cpu_us", to_us(idle_frame_cpu), 1}};
    print_cold_steps(cold_steps);
    print_close_locality(close_locality);
    print_call_cost(call_cost);
    std::printf("frame loop with nothing to tear down: %.1f us of CPU per frame (taken out of \"less frame loop\")\n",
                number(&frame_loop, "idle_frame_cpu_us"));
    if (!cfg.csv.empty()) write_csv(cfg.csv, rows);
    const row settings{{"budget_us", static_cast<double>(cfg.budget_us), 0},
                       {"hz", static_cast<double>(cfg.hz), 0},
                       {"max_step_us", static_cast<double>(cfg.max_step_us), 0},
                       {"max_step_deviations", cfg.max_step_deviations, 2},
                       {"carry_model", cfg.carry_model ? 1.0 : 0.0, 0},
                       {"drain_pause_us", static_cast<double>(cfg.drain_pause_us), 0},
                       {"rounds", static_cast<double>(cfg.rounds), 0},
                       {"burst_bytes", static_cast<double>(cfg.burst_bytes), 0},
                       {"pool_age_ms", static_cast<double>(cfg.pool_age_ms), 0}};
    if (!cfg.json.empty())
        write_json(cfg.json, machine,
                   {{"settings", {settings}}, {"rows", rows}, {"overhead", {overhead}}, {"cold_steps", {cold_steps}},
                    {"close_locality", {close_locality}}, {"call_cost", {call_cost}}, {"frame_loop", {frame_loop}}, {"targets", goals}});
    if (call_log::overflowed()) std::fprintf(stderr, "teardown_bench: call log overflowed; figures incomplete\n");
}

// Expected output (--quick on a 2-core VM under load; times vary by machine, the shape does not):
//   machine: source=bb3bab160868; date=2026-12-05T13:02:49Z; kernel=6.18.44; cpus=2; cpu_model=AMD EPYC; ...; shmem_thp=... [never] ...; loadavg_1min=4.52;
//   budget 1000 us per frame at 60 Hz; max_step 200 us at 2 deviations; drain_pause (queue+worker/pause) 50 us; 3 rounds; bursts of 40 MiB; each queue starts from the prior
//
//   teardown (us per pool, wall time unless marked cpu; munmap summed over a pool's chunks; ...):
//   scenario     bytes  pools            strategy  munmap p50  ...  close p50  ...  step p50  ...  steps  ...  cpu/pool
//      burst  20736000      2         close-first      1997.3  ...        6.0  ...    1997.3  ...    1.0  ...      2419
//      burst  20736000      2         unmap-first      1167.6  ...     1007.2  ...    1167.6  ...    1.0  ...      2451
//      burst  20736000      2         thread-drop      1267.4  ...      874.7  ...    1267.4  ...    1.0  ...      2445
//      burst  20736000      2               queue      2276.7  ...     1494.8  ...     191.2  ...   10.0  ...      4202
//      burst  20736000      2        queue+worker      1839.1  ...     1273.9  ...     192.8  ...   10.0  ...      4166
//      burst  20736000      2  queue+worker-unmap      1861.3  ...      976.2  ...     167.9  ...   10.0  ...      3445
//   (then the frame-thread table, the contention probe table with its baseline row,)
//   library overhead (Os calls cost nothing): push 49.9 ns, bookkeeping 40.3 ns per drain step, 0.000
//   allocations per push+drain; one steady_clock::now() costs 27.5 ns here
//
//   targets (A/A: the same field of the baseline's second run over its first; ...):
//     munmap p50 unmap-first / close-first                    0.585  <=    0.400  MISSED
//     cpu queue / unmap-first                                 1.206  <=    1.100  MISSED  A/A 1.051
//     ...
//     queue+worker frame max ms, not preempted                1.123  <=    2.000  met
//     allocations per push+drain                              0.000  <=    0.000  met

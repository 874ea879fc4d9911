// bench_common.hpp - what teardown_bench and stutter_demo share: real memfd pools, the teardown
// strategies, a frame loop, a timed Os policy, a contention probe, statistics and output writers.
//
// Guarantees: every pool is a real memfd with 4 KiB pages, written through a "client" mapping and read
// through the "compositor" mapping that is then torn down, as a compositor holds a wl_shm pool. Every
// munmap and close the strategies make goes through timed_os, so each strategy is measured by the same
// code. Tools only: this header allocates freely and exits on bad command lines.
//
//   bench::arg_parser args{"my_tool", "what it does"};
//   args.number("--pools", pools, "pools per burst");
//   args.parse(argc, argv);
//   auto engine = bench::make_engine(bench::strategy::queue_worker, {.budget = 1ms});
//   auto frames = bench::run_frames(*engine, plan, {.interval = 16667us});
#pragma once

#include <deferred_unmap/deferred_unmap.hpp>

#if __has_include(<du_source_revision.h>)
#include <du_source_revision.h>  // written at build time by cmake/source_revision.cmake
#else
#define DU_SOURCE_REVISION "unknown"
#endif

#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

namespace bench {

namespace du = deferred_unmap;
using steady = std::chrono::steady_clock;
using std::chrono::nanoseconds;

inline double to_us(nanoseconds d) { return static_cast<double>(d.count()) / 1e3; }
inline double to_ms(nanoseconds d) { return static_cast<double>(d.count()) / 1e6; }

/// 2880x1800 at 4 bytes per pixel: a HiDPI window's buffer, the pool size of the original report.
inline constexpr std::size_t default_pool_bytes = std::size_t{2880} * 1800 * 4;

// ---------------------------------------------------------------------------------------------------
// Command line

/// A small flag parser: `--name value` pairs and bare `--flag`s; --help prints the usage. Exits with
/// status 2 on anything it does not know.
class arg_parser {
public:
    arg_parser(std::string tool, std::string summary) : tool_(std::move(tool)), summary_(std::move(summary)) {}

    void flag(std::string name, bool& out, std::string help) {
        options_.push_back({std::move(name), "", std::move(help), [&out](std::string_view) { return out = true; }});
    }
    template <class T>
    void number(std::string name, T& out, std::string help) {
        options_.push_back({std::move(name), "N", std::move(help), [&out](std::string_view v) { return parse_number(v, out); }});
    }
    void text(std::string name, std::string& out, std::string help, std::string metavar = "FILE") {
        options_.push_back({std::move(name), std::move(metavar), std::move(help), [&out](std::string_view v) {
                                out = v;
                                return !out.empty();
                            }});
    }
    /// A byte size; may end in K, M or G (powers of 1024).
    void bytes(std::string name, std::size_t& out, std::string help) {
        options_.push_back({std::move(name), "B", std::move(help), [&out](std::string_view v) {
                                std::vector<std::size_t> one;
                                return parse_sizes(v, one) && one.size() == 1 && (out = one[0]) > 0;
                            }});
    }
    /// Comma-separated byte sizes; each may end in K, M or G (powers of 1024).
    void sizes(std::string name, std::vector<std::size_t>& out, std::string help) {
        options_.push_back({std::move(name), "B,B,..", std::move(help), [&out](std::string_view v) { return parse_sizes(v, out); }});
    }

    void parse(int argc, char** argv) const {
        for (int i = 1; i < argc; ++i) {
            const std::string_view arg = argv[i];
            if (arg == "--help" || arg == "-h") usage(stdout, 0);
            const option* opt = find(arg);
            if (opt == nullptr) fail("unknown option", arg);
            std::string_view value;
            if (!opt->metavar.empty()) {
                if (i + 1 >= argc) fail("missing value for", arg);
                value = argv[++i];
            }
            if (!opt->set(value)) fail("bad value for " + std::string(arg) + ":", value);
        }
    }

private:
    struct option {
        std::string name, metavar, help;
        std::function<bool(std::string_view)> set;
    };

    template <class T>
    static bool parse_number(std::string_view v, T& out) {
        if constexpr (std::is_floating_point_v<T>) {
            char* end = nullptr;
            const std::string copy(v);
            out = static_cast<T>(std::strtod(copy.c_str(), &end));
            return end != copy.c_str() && *end == '\0';
        } else {
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
            return ec == std::errc{} && end == v.data() + v.size();
        }
    }

    static bool parse_sizes(std::string_view v, std::vector<std::size_t>& out) {
        out.clear();
        while (!v.empty()) {
            const std::size_t comma = std::min(v.find(','), v.size());
            std::string_view item = v.substr(0, comma);
            v.remove_prefix(std::min(comma + 1, v.size()));
            std::size_t shift = 0;
            if (!item.empty() && (item.back() == 'K' || item.back() == 'M' || item.back() == 'G')) {
                shift = item.back() == 'K' ? 10 : item.back() == 'M' ? 20 : 30;
                item.remove_suffix(1);
            }
            std::size_t value = 0;
            if (!parse_number(item, value) || value == 0) return false;
            out.push_back(value << shift);
        }
        return !out.empty();
    }

    [[nodiscard]] const option* find(std::string_view name) const {
        for (const auto& opt : options_)
            if (opt.name == name) return &opt;
        return nullptr;
    }

    [[noreturn]] void fail(const std::string& what, std::string_view arg) const {
        std::fprintf(stderr, "%s: %s %.*s\n", tool_.c_str(), what.c_str(), static_cast<int>(arg.size()), arg.data());
        usage(stderr, 2);
    }

    [[noreturn]] void usage(std::FILE* to, int status) const {
        std::fprintf(to, "usage: %s [options]\n%s\n\n", tool_.c_str(), summary_.c_str());
        for (const auto& opt : options_) {
            const std::string left = opt.name + (opt.metavar.empty() ? "" : " " + opt.metavar);
            std::fprintf(to, "  %-24s %s\n", left.c_str(), opt.help.c_str());
        }
        std::exit(status);
    }

    std::string tool_, summary_;
    std::vector<option> options_;
};

// ---------------------------------------------------------------------------------------------------
// Time and CPU

inline nanoseconds cpu_clock(clockid_t id) noexcept {
    timespec ts{};
    ::clock_gettime(id, &ts);
    return std::chrono::seconds{ts.tv_sec} + nanoseconds{ts.tv_nsec};
}
inline nanoseconds process_cpu() { return cpu_clock(CLOCK_PROCESS_CPUTIME_ID); }

/// Involuntary context switches of the calling thread so far: a change across a timed section means
/// the scheduler took the CPU away (other load on the machine), so the section timed more than its work.
inline long involuntary_switches() {
    rusage usage{};
    ::getrusage(RUSAGE_THREAD, &usage);
    return usage.ru_nivcsw;
}

/// The compositor's own per-frame work (scene walk, damage, submit), as a busy loop.
inline void spin_for(nanoseconds d) {
    const auto until = steady::now() + d;
    while (steady::now() < until) {
    }
}

// ---------------------------------------------------------------------------------------------------
// Recorded system calls

/// One munmap or close made by any strategy, with where and how long.
struct call_record {
    enum class kind : std::uint8_t { unmap, close };
    kind op = kind::unmap;
    bool frame_thread = false;  ///< made by the frame thread (not a worker or dropping thread)
    const void* addr = nullptr;
    std::size_t bytes = 0;
    nanoseconds took{0};  ///< wall time: what the caller waited
    nanoseconds cpu{0};   ///< the calling thread's CPU time: the work, without preemption by other load
    static constexpr std::uint32_t no_frame = UINT32_MAX;
    std::uint32_t frame = no_frame;  ///< the frame of run_frames() the frame thread made it in
};

/// Process-wide log of calls, filled lock-free by timed_os from any thread. reset() before a run,
/// read after every thread that tears down has finished (the engines' finish() guarantees it).
class call_log {
public:
    static void reset(std::size_t capacity) {
        auto& self = instance();
        if (self.records_.size() < capacity) self.records_.resize(capacity);
        self.next_.store(0, std::memory_order_relaxed);
    }
    static void record(const call_record& r) noexcept {
        auto& self = instance();
        const std::size_t at = self.next_.fetch_add(1, std::memory_order_relaxed);
        if (at < self.records_.size()) self.records_[at] = r;
    }
    [[nodiscard]] static std::span<const call_record> records() {
        auto& self = instance();
        return {self.records_.data(), std::min(self.next_.load(std::memory_order_acquire), self.records_.size())};
    }
    [[nodiscard]] static bool overflowed() {
        auto& self = instance();
        return self.next_.load(std::memory_order_relaxed) > self.records_.size();
    }

    static bool& on_frame_thread() noexcept {
        thread_local bool value = false;
        return value;
    }
    /// The frame run_frames() is in, on the frame thread; no_frame elsewhere.
    static std::uint32_t& frame() noexcept {
        thread_local std::uint32_t value = call_record::no_frame;
        return value;
    }

private:
    static call_log& instance() {
        static call_log log;
        return log;
    }
    std::vector<call_record> records_;
    std::atomic<std::size_t> next_{0};
};

/// posix_os with every munmap and close timed into call_log.
struct timed_os {
    static void* map(void* hint, std::size_t length, int prot, int flags, int fd, off_t offset, int& error) noexcept {
        return du::posix_os::map(hint, length, prot, flags, fd, offset, error);
    }
    static int unmap(void* addr, std::size_t length) noexcept {
        return timed(call_record::kind::unmap, addr, length, [&] { return du::posix_os::unmap(addr, length); });
    }
    static int close(int fd) noexcept {
        return timed(call_record::kind::close, nullptr, 0, [&] { return du::posix_os::close(fd); });
    }
    /// The queue learns from the thread's CPU time and sleeps drain_pause, as it does on posix_os;
    /// while a wall-clock engine lives the clock reads as failed, so the queue learns from wall time.
    static std::chrono::nanoseconds thread_cpu_time() noexcept {
        return wall_clock_engines.load(std::memory_order_relaxed) > 0 ? nanoseconds{-1} : du::posix_os::thread_cpu_time();
    }
    /// Counted, not a flag: building the next engine before the last one is gone keeps the right clock.
    static inline std::atomic<int> wall_clock_engines{0};
    static void pause(nanoseconds d) noexcept { du::posix_os::pause(d); }

private:
    static int timed(call_record::kind op, const void* addr, std::size_t length, auto call) noexcept {
        const auto cpu_start = cpu_clock(CLOCK_THREAD_CPUTIME_ID);
        const auto start = steady::now();
        const int error = call();
        const auto took = steady::now() - start;
        const auto cpu = cpu_clock(CLOCK_THREAD_CPUTIME_ID) - cpu_start;
        call_log::record({op, call_log::on_frame_thread(), addr, length, took, cpu, call_log::frame()});
        return error;
    }
};

using pool = du::basic_shm_region<timed_os>;

// ---------------------------------------------------------------------------------------------------
// Pools

[[noreturn]] inline void die(const char* what) { throw std::system_error(errno, std::system_category(), what); }

/// A wl_shm pool as a compositor holds it: a memfd whose every page a client wrote through its own
/// mapping (since gone, as the client lives in another process), and the compositor's read mapping,
/// every page of which has been read (a texture upload). 4 KiB folios unless shmem THP is enabled.
inline pool make_pool(std::size_t bytes) {
    du::basic_unique_fd<timed_os> fd{::memfd_create("wl_shm", MFD_CLOEXEC)};
    if (!fd) die("memfd_create");
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) die("ftruncate");
    // MAP_POPULATE: the same pages and page tables as faulting them one by one, in a fraction of the time.
    void* client = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
    if (client == MAP_FAILED) die("mmap (client)");
    std::memset(client, 0x5a, bytes);
    ::munmap(client, bytes);
    auto view = du::basic_mapping<timed_os>::map(fd.get(), bytes, PROT_READ, MAP_SHARED | MAP_POPULATE);
    const auto* pixels = static_cast<const volatile unsigned char*>(view.data());
    unsigned sum = 0;
    for (std::size_t at = 0; at < bytes; at += 4096) sum += pixels[at];
    static std::atomic<unsigned> sink{0};
    sink.fetch_add(sum, std::memory_order_relaxed);  // the reads must happen
    return pool{std::move(fd), std::move(view)};
}

inline std::vector<pool> make_pools(std::size_t count, std::size_t bytes) {
    std::vector<pool> pools;
    pools.reserve(count);
    for (std::size_t i = 0; i < count; ++i) pools.push_back(make_pool(bytes));
    return pools;
}

// ---------------------------------------------------------------------------------------------------
// Strategies

/// The *_fixed_steps strategies are the queued modes under the step rule before max_step: every
/// munmap step a fixed 2 MiB, however long that takes, so the two rules are measured side by side.
/// queue_worker_low_priority is queue_worker with low_priority_closes (the worker at nice 10).
/// queue_worker_wall_clock is queue_worker learning from wall time (timed_os::cpu_clock_off), as
/// before the model learned from CPU time.
/// queue_worker_pause is queue_worker with drain_pause: a drain sleeps between two munmap steps, so a
/// thread woken when mmap_lock comes free takes it before the next step does.
enum class strategy {
    close_first,
    unmap_first,
    thread_drop,
    queue,
    queue_worker,
    queue_worker_unmap,
    queue_fixed_steps,
    queue_worker_fixed_steps,
    queue_worker_low_priority,
    queue_worker_pause,
    queue_worker_wall_clock,
    unmap_first_again,
    thread_drop_again,
};

inline constexpr strategy all_strategies[] = {
    strategy::close_first,        strategy::unmap_first,       strategy::thread_drop,
    strategy::queue,              strategy::queue_worker,      strategy::queue_worker_unmap,
    strategy::queue_fixed_steps,  strategy::queue_worker_fixed_steps, strategy::queue_worker_low_priority,
    strategy::queue_worker_pause, strategy::queue_worker_wall_clock,
    strategy::unmap_first_again,  strategy::thread_drop_again,
};

/// Each baseline that has a control, and the control that runs it once more.
inline constexpr std::pair<strategy, strategy> controls[] = {
    {strategy::unmap_first, strategy::unmap_first_again},
    {strategy::thread_drop, strategy::thread_drop_again},
};

/// The control that runs `s` once more, if `s` is a baseline that has one.
inline constexpr std::optional<strategy> control_of(strategy s) {
    for (const auto& [baseline, control] : controls)
        if (baseline == s) return control;
    return std::nullopt;
}

/// A second run of a baseline, there only to show the noise of a ratio against it.
inline constexpr bool is_control(strategy s) {
    return std::any_of(std::begin(controls), std::end(controls), [s](const auto& c) { return c.second == s; });
}

/// The strategies with a queue, hence a cost model to learn; the others are today's compositors.
/// A switch with no default: -Wswitch makes a new strategy say which it is.
inline constexpr bool has_model(strategy s) {
    switch (s) {
        case strategy::close_first:
        case strategy::unmap_first:
        case strategy::thread_drop:
        case strategy::unmap_first_again:
        case strategy::thread_drop_again: return false;
        case strategy::queue:
        case strategy::queue_worker:
        case strategy::queue_worker_unmap:
        case strategy::queue_fixed_steps:
        case strategy::queue_worker_fixed_steps:
        case strategy::queue_worker_low_priority:
        case strategy::queue_worker_pause:
        case strategy::queue_worker_wall_clock: return true;
    }
    return false;
}

inline const char* name(strategy s) {
    switch (s) {
        case strategy::close_first: return "close-first";
        case strategy::unmap_first: return "unmap-first";
        case strategy::thread_drop: return "thread-drop";
        case strategy::queue: return "queue";
        case strategy::queue_worker: return "queue+worker";
        case strategy::queue_worker_unmap: return "queue+worker-unmap";
        case strategy::queue_fixed_steps: return "queue/2MiB";
        case strategy::queue_worker_fixed_steps: return "queue+worker/2MiB";
        case strategy::queue_worker_low_priority: return "queue+worker/nice";
        case strategy::queue_worker_pause: return "queue+worker/pause";
        case strategy::queue_worker_wall_clock: return "queue+worker/wall";
        case strategy::unmap_first_again: return "unmap-first/again";
        case strategy::thread_drop_again: return "thread-drop/again";
    }
    return "?";
}

/// How a compositor gets rid of dead pools. release() and frame() run on the frame thread.
class teardown_engine {
public:
    virtual ~teardown_engine() = default;
    /// The pool died (wl_shm_pool.destroy with no buffer left).
    virtual void release(pool&& p) = 0;
    /// Once per frame, after the commit.
    virtual void frame() = 0;
    /// Every byte unmapped and every descriptor closed.
    [[nodiscard]] virtual bool idle() const = 0;
    /// Blocks until idle, with any background thread's writes visible to the caller.
    virtual void finish() = 0;
    /// The queue's totals, for the strategies that have one.
    [[nodiscard]] virtual std::optional<du::reclaim_stats> queue_stats() const { return std::nullopt; }
    /// The cost model the queue learned, for the strategies that have one.
    [[nodiscard]] virtual std::optional<du::cost_model> model() const { return std::nullopt; }
};

/// Today's compositors: tear down on the spot, in one order or the other.
class immediate_engine final : public teardown_engine {
public:
    explicit immediate_engine(bool close_first) : close_first_(close_first) {}
    void release(pool&& p) override {
        if (!close_first_) return p.reset();
        auto [fd, view] = p.release();
        fd.reset();
        view.reset();
    }
    void frame() override {}
    [[nodiscard]] bool idle() const override { return true; }
    void finish() override {}

private:
    bool close_first_;
};

/// Smithay's way: each dead pool is handed whole to one dropping thread, which munmaps then closes it.
class thread_drop_engine final : public teardown_engine {
public:
    thread_drop_engine() : thread_([this](std::stop_token stop) { run(stop); }) {}
    ~thread_drop_engine() override { finish(); }

    void release(pool&& p) override {
        {
            std::lock_guard lock(mutex_);
            dead_.push_back(std::move(p));
        }
        wake_.notify_one();
    }
    void frame() override {}
    [[nodiscard]] bool idle() const override {
        std::lock_guard lock(mutex_);
        return dead_.empty() && !busy_;
    }
    void finish() override {
        std::unique_lock lock(mutex_);
        done_.wait(lock, [this] { return dead_.empty() && !busy_; });
    }

private:
    void run(std::stop_token stop) {
        std::unique_lock lock(mutex_);
        while (wake_.wait(lock, stop, [this] { return !dead_.empty(); })) {
            pool p = std::move(dead_.front());
            dead_.pop_front();
            busy_ = true;
            lock.unlock();
            p.reset();
            lock.lock();
            busy_ = false;
            if (dead_.empty()) done_.notify_all();
        }
    }

    mutable std::mutex mutex_;
    std::condition_variable_any wake_;
    std::condition_variable done_;
    std::deque<pool> dead_;
    bool busy_ = false;
    std::jthread thread_;
};

/// This library: push on death, drain a budget per frame.
class queue_engine final : public teardown_engine {
public:
    using queue_type = du::basic_reclaim_queue<steady, timed_os>;
    queue_engine(nanoseconds budget, du::reclaim_options options, bool wall_clock = false)
        : budget_(budget), wall_clock_(wall_clock), queue_(std::move(options)) {
        if (wall_clock_) timed_os::wall_clock_engines.fetch_add(1, std::memory_order_relaxed);
    }
    ~queue_engine() override {
        queue_.flush();  // the worker's last steps still see the clock this engine chose
        if (wall_clock_) timed_os::wall_clock_engines.fetch_sub(1, std::memory_order_relaxed);
    }

    void release(pool&& p) override { queue_.push(std::move(p)); }
    void frame() override { queue_.drain(budget_); }
    [[nodiscard]] bool idle() const override { return queue_.empty(); }
    void finish() override { queue_.flush(); }
    [[nodiscard]] std::optional<du::reclaim_stats> queue_stats() const override { return queue_.stats(); }
    [[nodiscard]] std::optional<du::cost_model> model() const override { return queue_.model(); }

private:
    nanoseconds budget_;
    bool wall_clock_;
    queue_type queue_;
};

inline du::reclaim_options fixed_steps(bool close_on_worker) {
    return {.unmap_chunk_bytes = std::size_t{2} << 20, .max_step = std::chrono::hours{1}, .close_on_worker = close_on_worker};
}

/// What the queued strategies are run with: the drain budget per frame, max_step and
/// max_step_deviations (all but the 2MiB ones), the sleep queue+worker/pause takes between two munmap
/// steps of a drain, and the model a queue starts from (the library's prior when empty).
struct queue_settings {
    nanoseconds budget{std::chrono::milliseconds{1}};
    nanoseconds max_step = du::reclaim_options{}.max_step;
    double max_step_deviations = du::reclaim_options{}.max_step_deviations;
    nanoseconds drain_pause{std::chrono::microseconds{50}};
    std::optional<du::cost_model> prior;
};

/// --max-step-deviations as both tools take it: finite and >= 0, or the tool exits with status 2.
inline void check_step_deviations(const char* tool, double deviations) {
    if (std::isfinite(deviations) && deviations >= 0.0) return;
    std::fprintf(stderr, "%s: --max-step-deviations must be finite and >= 0\n", tool);
    std::exit(2);
}

inline std::unique_ptr<teardown_engine> make_engine(strategy s, const queue_settings& q) {
    const auto queued = [&](bool close_on_worker) {
        return du::reclaim_options{.max_step = q.max_step, .max_step_deviations = q.max_step_deviations, .close_on_worker = close_on_worker};
    };
    const auto engine = [&](du::reclaim_options options, bool wall_clock = false) {
        if (q.prior) options.prior = *q.prior;
        return std::make_unique<queue_engine>(q.budget, std::move(options), wall_clock);
    };
    du::reclaim_options options = queued(true);
    switch (s) {
        case strategy::close_first: return std::make_unique<immediate_engine>(true);
        case strategy::unmap_first:
        case strategy::unmap_first_again: return std::make_unique<immediate_engine>(false);
        case strategy::thread_drop:
        case strategy::thread_drop_again: return std::make_unique<thread_drop_engine>();
        case strategy::queue: return engine(queued(false));
        case strategy::queue_worker: break;
        case strategy::queue_worker_unmap:
            options = queued(false);
            options.unmap_on_worker = true;
            break;
        case strategy::queue_fixed_steps: return engine(fixed_steps(false));
        case strategy::queue_worker_fixed_steps: return engine(fixed_steps(true));
        case strategy::queue_worker_low_priority: options.low_priority_closes = true; break;
        case strategy::queue_worker_pause: options.drain_pause = q.drain_pause; break;
        case strategy::queue_worker_wall_clock: return engine(options, true);
    }
    return engine(options);
}

// ---------------------------------------------------------------------------------------------------
// The frame loop

struct frame_config {
    nanoseconds interval{16'666'667};
    nanoseconds work{0};             ///< the compositor's own busy work each frame
    std::size_t first_release = 0;   ///< frame at which the first pools die
    std::size_t tail_frames = 0;     ///< frames kept running after all memory is back
    std::size_t max_frames = 100000; ///< safety stop; the rest is then flushed
};

struct frame_record {
    nanoseconds teardown{0};  ///< frame thread's time in release() and frame()
    nanoseconds total{0};     ///< the whole frame: work + teardown
    bool preempted = false;   ///< the frame thread lost its CPU during the teardown part
    std::size_t calls = 0;    ///< munmaps and closes the frame thread made in it (with call_log reset)
    nanoseconds longest_call{0};      ///< the longest of them, wall time
    nanoseconds longest_call_cpu{0};  ///< its thread CPU time: far below the wall time, it was off the CPU
};

struct frame_run {
    std::vector<frame_record> frames;
    std::size_t frames_to_return = 0;  ///< frames from the first release until all memory was back
    bool hit_limit = false;
    /// The frame thread's CPU time outside release() and frame(): its own work and waking each vblank,
    /// which a compositor whose screen changes spends whether pools die or not.
    nanoseconds loop_cpu{0};
};

/// Runs frames at `config.interval`, releasing `dead[i]` at frame first_release + i and calling
/// engine.frame() after each commit, until everything is released and the engine is idle. A frame that
/// overruns skips the vblanks it missed, as a compositor does; `tail_frames` more frames follow.
/// Ends with engine.finish().
inline frame_run run_frames(teardown_engine& engine, std::vector<std::vector<pool>>& dead, const frame_config& config) {
    call_log::on_frame_thread() = true;
    frame_run run;
    std::size_t stop_after = config.max_frames;
    auto deadline = steady::now() + config.interval;
    nanoseconds teardown_cpu{0};
    const nanoseconds loop_cpu_start = cpu_clock(CLOCK_THREAD_CPUTIME_ID);
    for (std::size_t f = 0; f < stop_after; ++f) {
        const auto start = steady::now();
        spin_for(config.work);
        const long switches = involuntary_switches();
        const nanoseconds cpu_before = cpu_clock(CLOCK_THREAD_CPUTIME_ID);
        const auto teardown_start = steady::now();
        call_log::frame() = static_cast<std::uint32_t>(f);
        if (f >= config.first_release && f - config.first_release < dead.size())
            for (auto& p : dead[f - config.first_release]) engine.release(std::move(p));
        engine.frame();
        const auto end = steady::now();
        teardown_cpu += cpu_clock(CLOCK_THREAD_CPUTIME_ID) - cpu_before;
        run.frames.push_back({end - teardown_start, end - start, involuntary_switches() != switches});
        const bool all_released = f + 1 >= config.first_release + dead.size();
        if (stop_after == config.max_frames && all_released && engine.idle()) {
            run.frames_to_return = f + 1 - config.first_release;
            stop_after = std::min(config.max_frames, f + 1 + config.tail_frames);
        }
        while (deadline <= end) deadline += config.interval;
        if (f + 1 < stop_after) std::this_thread::sleep_until(deadline);
    }
    run.hit_limit = run.frames_to_return == 0;
    run.loop_cpu = cpu_clock(CLOCK_THREAD_CPUTIME_ID) - loop_cpu_start - teardown_cpu;
    call_log::frame() = call_record::no_frame;
    engine.finish();
    call_log::on_frame_thread() = false;
    for (const auto& r : call_log::records()) {
        if (r.frame >= run.frames.size()) continue;
        auto& frame = run.frames[r.frame];
        ++frame.calls;
        if (r.took <= frame.longest_call) continue;
        frame.longest_call = r.took;
        frame.longest_call_cpu = r.cpu;
    }
    return run;
}

// ---------------------------------------------------------------------------------------------------
// Statistics

struct summary {
    double p50 = 0, p99 = 0, p999 = 0, max = 0;
};

/// Nearest-rank quantiles. Sorts `values`.
inline summary summarize(std::vector<double>& values) {
    summary s;
    if (values.empty()) return s;
    std::sort(values.begin(), values.end());
    const auto at = [&](double q) {
        const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
        return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
    };
    s.p50 = at(0.5);
    s.p99 = at(0.99);
    s.p999 = at(0.999);
    s.max = values.back();
    return s;
}

inline double median_of(std::vector<double> values) { return summarize(values).p50; }

/// Per-call and per-pool syscall times of one run, taken from call_log.
struct call_times {
    std::vector<double> unmap_steps_us, unmap_per_pool_us, close_us;
    std::vector<double> unmap_cpu_per_pool_us, close_cpu_us;  // the same, in thread CPU time
    double work_ms = 0;              ///< every munmap and close, on any thread
    double max_frame_close_us = 0;   ///< the largest single close() on the frame thread
    /// The longest a thread spent off the CPU inside one munmap (wall - CPU time): an upper bound on
    /// how long it was preempted there holding mmap_lock (it includes sleeping while waiting for it).
    double max_unmap_off_cpu_us = 0;
    std::size_t unmap_calls = 0;
    std::size_t unmap_calls_over_max_step = 0;  ///< munmaps that took longer than max_step in CPU time
};

/// Groups the logged munmaps by pool (chunks of one pool add up) using each pool's mapped range;
/// counts the munmaps whose CPU time ran past `max_step`.
inline call_times collect_calls(std::span<const std::pair<const void*, std::size_t>> ranges,
                                nanoseconds max_step = du::reclaim_options{}.max_step) {
    call_times out;
    std::vector<double> per_pool(ranges.size(), 0.0), cpu_per_pool(ranges.size(), 0.0);
    for (const auto& r : call_log::records()) {
        const double us = to_us(r.took), cpu_us = to_us(r.cpu);
        out.work_ms += us / 1e3;
        if (r.op == call_record::kind::close) {
            out.close_us.push_back(us);
            out.close_cpu_us.push_back(cpu_us);
            if (r.frame_thread) out.max_frame_close_us = std::max(out.max_frame_close_us, us);
            continue;
        }
        out.unmap_steps_us.push_back(us);
        out.max_unmap_off_cpu_us = std::max(out.max_unmap_off_cpu_us, us - cpu_us);
        ++out.unmap_calls;
        if (r.cpu > max_step) ++out.unmap_calls_over_max_step;
        const auto it = std::upper_bound(ranges.begin(), ranges.end(), r.addr,
                                         [](const void* a, const auto& range) { return std::less<>{}(a, range.first); });
        if (it == ranges.begin()) continue;
        const auto pool_index = static_cast<std::size_t>(it - ranges.begin()) - 1;
        per_pool[pool_index] += us;
        cpu_per_pool[pool_index] += cpu_us;
    }
    for (std::size_t i = 0; i < per_pool.size(); ++i) {
        if (per_pool[i] <= 0) continue;
        out.unmap_per_pool_us.push_back(per_pool[i]);
        out.unmap_cpu_per_pool_us.push_back(cpu_per_pool[i]);
    }
    return out;
}

/// The mapped ranges of `pools`, sorted by address, for collect_calls.
inline std::vector<std::pair<const void*, std::size_t>> ranges_of(const std::vector<std::vector<pool>>& dead) {
    std::vector<std::pair<const void*, std::size_t>> ranges;
    for (const auto& batch : dead)
        for (const auto& p : batch) ranges.emplace_back(p.data(), p.size());
    std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return std::less<>{}(a.first, b.first); });
    return ranges;
}

// ---------------------------------------------------------------------------------------------------
// Output: one row per strategy, written as a table, CSV or JSON

struct field {
    std::string name;
    std::variant<double, std::string> value;
    int decimals = 1;  ///< in the table and CSV
};
using row = std::vector<field>;

/// The field called `name` in `r`, or nullptr.
inline const field* find_field(const row& r, std::string_view name) {
    for (const auto& f : r)
        if (f.name == name) return &f;
    return nullptr;
}

/// The numeric field called `name`, or NaN when `r` is null or has no such number.
inline double number(const row* r, std::string_view name) {
    const field* f = r ? find_field(*r, name) : nullptr;
    const double* v = f ? std::get_if<double>(&f->value) : nullptr;
    return v ? *v : std::nan("");
}

/// The text field called `name` in `r`, or "".
inline std::string text(const row& r, std::string_view name) {
    const field* f = find_field(r, name);
    const std::string* v = f ? std::get_if<std::string>(&f->value) : nullptr;
    return v ? *v : std::string{};
}

inline std::string fixed(double value, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
    return buf;
}

inline std::string format(const field& f) {
    if (const auto* s = std::get_if<std::string>(&f.value)) return *s;
    return fixed(std::get<double>(f.value), f.decimals);
}

/// A column of the stdout table: a field name and a short header.
struct column {
    std::string field, header;
};

inline void print_table(std::FILE* to, const std::vector<row>& rows, const std::vector<column>& columns) {
    std::vector<std::size_t> widths;
    for (const auto& c : columns) {
        std::size_t w = c.header.size();
        for (const auto& r : rows)
            for (const auto& f : r)
                if (f.name == c.field) w = std::max(w, format(f).size());
        widths.push_back(w);
    }
    for (std::size_t i = 0; i < columns.size(); ++i)
        std::fprintf(to, "%s%*s", i ? "  " : "", static_cast<int>(widths[i]), columns[i].header.c_str());
    std::fputc('\n', to);
    for (const auto& r : rows) {
        for (std::size_t i = 0; i < columns.size(); ++i) {
            std::string cell = "-";
            for (const auto& f : r)
                if (f.name == columns[i].field) cell = format(f);
            std::fprintf(to, "%s%*s", i ? "  " : "", static_cast<int>(widths[i]), cell.c_str());
        }
        std::fputc('\n', to);
    }
}

/// CSV with the union of all rows' field names as header (in first-seen order); missing cells empty.
inline void write_csv(const std::string& path, const std::vector<row>& rows) {
    std::vector<std::string> names;
    for (const auto& r : rows)
        for (const auto& f : r)
            if (std::find(names.begin(), names.end(), f.name) == names.end()) names.push_back(f.name);
    std::ofstream out(path);
    for (std::size_t i = 0; i < names.size(); ++i) out << (i ? "," : "") << names[i];
    out << '\n';
    for (const auto& r : rows) {
        for (std::size_t i = 0; i < names.size(); ++i) {
            out << (i ? "," : "");
            for (const auto& f : r)
                if (f.name == names[i]) out << format(f);
        }
        out << '\n';
    }
    if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::string json_string(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    return out + '"';
}

inline std::string json_object(const row& r) {
    std::string out = "{";
    for (std::size_t i = 0; i < r.size(); ++i) {
        out += (i ? ", " : "") + json_string(r[i].name) + ": ";
        if (const auto* s = std::get_if<std::string>(&r[i].value)) {
            out += json_string(*s);
        } else if (const double v = std::get<double>(r[i].value); std::isfinite(v)) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%.9g", v);
            out += buf;
        } else {
            out += "null";  // a ratio with nothing to divide by (e.g. no probe samples in a short window)
        }
    }
    return out + "}";
}

/// {"machine": {...}, "<section>": [rows...], ...}: one array of row objects per named section.
inline void write_json(const std::string& path, const row& machine,
                       const std::vector<std::pair<std::string, std::vector<row>>>& sections) {
    std::ofstream out(path);
    out << "{\n  \"machine\": " << json_object(machine);
    for (const auto& [section, rows] : sections) {
        out << ",\n  " << json_string(section) << ": [";
        for (std::size_t i = 0; i < rows.size(); ++i) out << (i ? ",\n    " : "\n    ") << json_object(rows[i]);
        out << "\n  ]";
    }
    out << "\n}\n";
    if (!out) throw std::runtime_error("cannot write " + path);
}

/// A target from the benchmark's specification: `value` must not exceed `limit`.
inline row target(std::string what, double value, double limit) {
    return {{"target", std::move(what)}, {"value", value, 3}, {"limit", limit, 3}, {"met", value <= limit ? 1.0 : 0.0, 0}};
}

/// `t` with its A/A control beside it, so a reader can tell a ratio that misses from one the machine
/// alone would have made as far from 1.
inline row with_control(row t, double control) {
    t.push_back({"control", control, 3});
    return t;
}

inline void print_targets(const std::vector<row>& targets) {
    const bool controlled = std::any_of(targets.begin(), targets.end(), [](const row& t) { return find_field(t, "control") != nullptr; });
    std::printf("\ntargets%s:\n", controlled ? " (A/A: the same field of the baseline's second run over its first; one draw of "
                                                 "this run's noise, which may go either way)"
                                               : "");
    for (const auto& t : targets) {
        const char* verdict = number(&t, "met") > 0 ? "met" : "MISSED";
        std::printf("  %-50s %10.3f  <= %8.3f  %s", text(t, "target").c_str(), number(&t, "value"), number(&t, "limit"), verdict);
        if (find_field(t, "control") != nullptr) std::printf("%*sA/A %.3f", 8 - static_cast<int>(std::strlen(verdict)), "", number(&t, "control"));
        std::printf("\n");
    }
}

// ---------------------------------------------------------------------------------------------------
// The machine

inline std::string first_line(const char* path, std::string_view starting_with = "") {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);)
        if (line.starts_with(starting_with)) return line;
    return "?";
}

/// Now, as UTC in ISO 8601 to the second.
inline std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm utc{};
    ::gmtime_r(&t, &utc);
    char text[sizeof "2026-12-05T13:04:05Z"];
    return std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc) == 0 ? "?" : text;
}

/// What a reader needs to compare figures: the code measured and when, kernel, CPUs, memory, shmem
/// THP policy, load.
inline row machine_info() {
    utsname u{};
    ::uname(&u);
    std::string cpu = first_line("/proc/cpuinfo", "model name");
    cpu = cpu.substr(std::min(cpu.find(':') + 2, cpu.size()));
    double load[3] = {0, 0, 0};
    ::getloadavg(load, 3);
    return {{"source", std::string(DU_SOURCE_REVISION)},
            {"date", utc_now()},
            {"kernel", std::string(u.release)},
            {"cpus", static_cast<double>(std::thread::hardware_concurrency()), 0},
            {"cpu_model", cpu},
            {"mem_total", first_line("/proc/meminfo", "MemTotal")},
            {"shmem_thp", first_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled")},
            {"loadavg_1min", load[0], 2}};
}

inline void print_machine(const row& machine) {
    std::printf("machine:");
    for (const auto& f : machine) std::printf(" %s=%s;", f.name.c_str(), format(f).c_str());
    std::printf("\n");
}

/// One progress line on stderr, overwritten in place.
inline void progress(const char* fmt, auto... args) {
    std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, fmt, args...);
    std::fflush(stderr);
}
inline void progress_done() { std::fprintf(stderr, "\r\033[K"); }

}  // namespace bench

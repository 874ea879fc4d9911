// shm_compositor: a headless Wayland compositor whose wl_shm pools are torn down through deferred_unmap.
//
//   shm_compositor [--socket NAME] [--hz N] [--budget-us N] [--mode MODE] [--duration S] [--json FILE]
//                  [-- CMD [ARGS...]]
//
// MODE is close-first, unmap-first, queue (default), queue+worker or queue+worker-unmap. With a
// command, starts it with WAYLAND_DISPLAY set and exits when it exits (with its status), or ends it
// at --duration (status 0). Without one, serves until --duration, SIGINT or SIGTERM. If
// XDG_RUNTIME_DIR is unset, the socket goes in a private temporary directory, removed at exit.
// At exit: every client is destroyed, every pool reclaimed, and the summary printed (and written as
// JSON), with the descriptors and file mappings the process holds compared to what it held at start.
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <dirent.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <wayland-server-core.h>

#include "frame_loop.hpp"
#include "reclaimer.hpp"
#include "shm.hpp"
#include "sigbus_guard.hpp"
#include "surfaces.hpp"

extern char** environ;

namespace {

using namespace shm_compositor;
using std::chrono::nanoseconds;

struct options {
    std::string socket;
    int hz = 60;
    long budget_us = 1000;
    reclaim_mode mode = reclaim_mode::queue;
    double duration_s = 0;  // 0: no limit
    std::string json;
    std::vector<char*> command;  // null-terminated when non-empty
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "shm_compositor: %s\nusage: shm_compositor [--socket NAME] [--hz N] [--budget-us N]\n"
                 "    [--mode close-first|unmap-first|queue|queue+worker|queue+worker-unmap]\n"
                 "    [--duration S] [--json FILE] [-- CMD [ARGS...]]\n",
                 why);
    std::exit(2);
}

options parse_options(int argc, char** argv) {
    options opt;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg == "--") {
            opt.command.assign(argv + i + 1, argv + argc);
            if (opt.command.empty()) usage("-- needs a command");
            opt.command.push_back(nullptr);
            break;
        }
        if (i + 1 >= argc) usage("missing value");
        const char* value = argv[++i];
        if (arg == "--socket") opt.socket = value;
        else if (arg == "--hz") opt.hz = std::atoi(value);
        else if (arg == "--budget-us") opt.budget_us = std::atol(value);
        else if (arg == "--duration") opt.duration_s = std::atof(value);
        else if (arg == "--json") opt.json = value;
        else if (arg == "--mode") {
            const auto mode = parse_mode(value);
            if (!mode) usage("unknown --mode");
            opt.mode = *mode;
        } else usage("unknown option");
    }
    if (opt.hz <= 0 || opt.hz > 1000 || opt.budget_us <= 0) usage("--hz must be 1..1000 and --budget-us positive");
    return opt;
}

// ---- what the process holds ----

std::size_t count_fds() {
    std::size_t count = 0;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
        while (const dirent* entry = ::readdir(dir))
            if (entry->d_name[0] != '.') ++count;
        ::closedir(dir);
        --count;  // the directory's own descriptor
    }
    return count;
}

// File-backed mappings: client pools are memfd mappings, so a pool not unmapped shows here. Anonymous
// mappings are left out: malloc (and a sanitizer's allocator) make and keep those as they please.
std::size_t count_file_maps() {
    std::ifstream maps("/proc/self/maps");
    std::size_t count = 0;
    std::string address, perms, offset, device;
    unsigned long inode = 0;
    for (std::string rest; maps >> address >> perms >> offset >> device >> inode; std::getline(maps, rest))
        if (inode != 0) ++count;
    return count;
}

// ---- the runtime directory ----

// A private XDG_RUNTIME_DIR when none is set; removed by the destructor.
struct runtime_dir {
    std::string made;
    runtime_dir() {
        if (std::getenv("XDG_RUNTIME_DIR") != nullptr) return;
        char path[] = "/tmp/shm_compositor-XXXXXX";
        if (::mkdtemp(path) == nullptr) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
        made = path;
        ::setenv("XDG_RUNTIME_DIR", path, 1);
    }
    ~runtime_dir() {
        if (!made.empty()) ::rmdir(made.c_str());
    }
};

// ---- the client ----

struct child_process {
    pid_t pid = -1;
    std::optional<int> status;  // set once reaped

    void spawn(std::vector<char*>& argv) {
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        sigset_t none;
        sigemptyset(&none);
        posix_spawnattr_setsigmask(&attr, &none);  // the compositor blocks signals it reads via signalfd
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
        const int error = ::posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), environ);
        posix_spawnattr_destroy(&attr);
        if (error != 0) throw std::runtime_error(std::string("cannot start ") + argv[0] + ": " + std::strerror(error));
    }
    bool reap(int flags) {
        int raw = 0;
        if (pid < 0 || status || ::waitpid(pid, &raw, flags) != pid) return false;
        status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
        return true;
    }
    // Asks it to stop, then insists after two seconds.
    void end() {
        if (pid < 0 || status) return;
        ::kill(pid, SIGTERM);
        for (int i = 0; i < 200 && !reap(WNOHANG); ++i) ::usleep(10'000);
        if (!status) ::kill(pid, SIGKILL);
        reap(0);
    }
};

// ---- the server ----

struct display_deleter {
    void operator()(wl_display* display) const noexcept { wl_display_destroy(display); }
};

wl_display* create_display() {
    wl_display* display = wl_display_create();
    if (display == nullptr) throw std::runtime_error("wl_display_create failed");
    return display;
}

// Counts clients as they connect. Standard layout, listener first: the notification finds the count.
struct client_counter {
    wl_listener listener{};
    std::uint64_t count = 0;
    static void on_created(wl_listener* listener, void*) { ++reinterpret_cast<client_counter*>(listener)->count; }
};

// Declared in teardown order, reversed: the display goes last, after every global and event source.
struct server {
    options opt;
    std::unique_ptr<wl_display, display_deleter> display{create_display()};
    reclaimer reclaim;
    shm_global shm;
    scene output;
    frame_loop frames;
    client_counter clients;
    child_process child;
    bool running = true;
    bool ended_at_duration = false;

    explicit server(options o)
        : opt(std::move(o)),
          reclaim(opt.mode, 2 * (nanoseconds{1'000'000'000} / opt.hz)),  // idle: drain every other vblank
          shm(display.get(), reclaim),
          output(display.get(), output_mode{1920, 1080, opt.hz * 1000}),
          frames(loop(), output, reclaim, opt.hz, std::chrono::microseconds{opt.budget_us}) {
        output.on_repaint_needed([this] { frames.schedule_repaint(); });
        reclaim.on_retire([this] { frames.arm_idle_timer(); });
        clients.listener.notify = client_counter::on_created;
        wl_display_add_client_created_listener(display.get(), &clients.listener);
    }

    [[nodiscard]] wl_event_loop* loop() const noexcept { return wl_display_get_event_loop(display.get()); }

    // Clients gone (their pools retired), then every retired pool torn down.
    void shut_down() noexcept {
        wl_display_destroy_clients(display.get());
        reclaim.flush();
    }
};

int on_signal(int signal, void* data) {
    auto& s = *static_cast<server*>(data);
    if (signal != SIGCHLD || s.child.reap(WNOHANG)) s.running = false;
    return 0;
}

int on_duration(void* data) {
    auto& s = *static_cast<server*>(data);
    s.running = false;
    s.ended_at_duration = true;
    return 0;
}

std::string add_socket(wl_display* display, const std::string& name) {
    if (!name.empty()) {
        if (wl_display_add_socket(display, name.c_str()) != 0)
            throw std::runtime_error("cannot listen on " + name + ": " + std::strerror(errno));
        return name;
    }
    const char* chosen = wl_display_add_socket_auto(display);
    if (chosen == nullptr) throw std::runtime_error(std::string("cannot add a socket: ") + std::strerror(errno));
    return chosen;
}

void run(server& s) {
    while (s.running) {
        wl_display_flush_clients(s.display.get());
        if (wl_event_loop_dispatch(s.loop(), -1) < 0 && errno != EINTR) break;
    }
    s.child.end();
    // Requests the client sent before it went are still in the socket: handle them as it would expect.
    wl_display_flush_clients(s.display.get());
    wl_event_loop_dispatch(s.loop(), 0);
}

// ---- the report ----

struct holdings {
    std::size_t fds = 0;
    std::size_t maps = 0;
};

double us(nanoseconds d) { return static_cast<double>(d.count()) / 1e3; }

std::vector<std::pair<std::string, std::string>> report(const server& s, holdings start, holdings end) {
    const reclaim_summary r = s.reclaim.summary();
    const shm_counters& shm = s.shm.counters();
    const frame_stats& f = s.frames.stats();
    const auto reclaimed_pools = r.pools_retired - std::min<std::uint64_t>(r.pools_retired, s.reclaim.pending_items());
    auto num = [](auto v) { return std::to_string(v); };
    auto fixed = [](double v) {
        char text[32];
        std::snprintf(text, sizeof text, "%.1f", v);
        return std::string(text);
    };
    return {
        {"mode", '"' + std::string(mode_name(s.opt.mode)) + '"'},
        {"hz", num(s.opt.hz)},
        {"budget_us", num(s.opt.budget_us)},
        {"frames", num(f.frames)},
        {"missed_frames", num(f.missed_frames)},
        {"frame_time_p50_us", fixed(us(f.frame_times.quantile(0.5)))},
        {"frame_time_p99_us", fixed(us(f.frame_times.quantile(0.99)))},
        {"frame_time_max_us", fixed(us(f.frame_times.max()))},
        {"clients", num(s.clients.count)},
        {"buffers_read", num(s.output.buffers_read())},
        {"protocol_errors_sigbus", num(shm.truncated_reads)},
        {"pools_created", num(shm.pools_created)},
        {"pools_reclaimed", num(reclaimed_pools)},
        {"resizes", num(shm.resizes)},
        {"views_reclaimed", num(r.items_reclaimed - std::min(r.items_reclaimed, reclaimed_pools))},
        {"bytes_reclaimed", num(r.bytes_reclaimed)},
        {"teardown_errors", num(r.teardown_errors)},
        {"max_pending_bytes", num(r.max_pending_bytes)},
        {"drains", num(r.drains.count())},
        {"idle_drains", num(f.idle_drains)},
        {"drain_p50_us", fixed(us(r.drains.quantile(0.5)))},
        {"drain_p99_us", fixed(us(r.drains.quantile(0.99)))},
        {"drain_max_us", fixed(us(r.drains.max()))},
        {"step_p99_us", fixed(us(r.steps.quantile(0.99)))},
        {"step_max_us", fixed(us(r.steps.max()))},
        {"worker_step_max_us", fixed(us(r.worker_step_max))},
        {"model_unmap_ns_per_mib", fixed(r.model.unmap_ns_per_byte * 1048576.0)},
        {"model_unmap_deviation_ns_per_mib", fixed(r.model.unmap_deviation_ns_per_byte * 1048576.0)},
        {"model_close_ns_per_mib", fixed(r.model.close_ns_per_byte * 1048576.0)},
        {"fds_start", num(start.fds)},
        {"fds_end", num(end.fds)},
        {"file_maps_start", num(start.maps)},
        {"file_maps_end", num(end.maps)},
        {"client_status", s.child.status ? num(*s.child.status) : std::string("null")},
        {"ended_at_duration", s.ended_at_duration ? "true" : "false"},
    };
}

// Flat JSON, one key per line, so shell scripts can read it with grep.
void write_json(const std::string& path, const std::vector<std::pair<std::string, std::string>>& fields) {
    std::ofstream out(path);
    out << "{\n";
    for (std::size_t i = 0; i < fields.size(); ++i)
        out << "  \"" << fields[i].first << "\": " << fields[i].second << (i + 1 < fields.size() ? ",\n" : "\n");
    out << "}\n";
    if (!out) std::fprintf(stderr, "shm_compositor: cannot write %s\n", path.c_str());
}

void print_summary(const std::vector<std::pair<std::string, std::string>>& fields) {
    std::printf("shm_compositor:");
    for (const auto& [key, value] : fields) std::printf(" %s=%s", key.c_str(), value.c_str());
    std::printf("\n");
}

int serve(options opt) {
    runtime_dir runtime;
    server s{std::move(opt)};
    const std::string socket = add_socket(s.display.get(), s.opt.socket);
    ::setenv("WAYLAND_DISPLAY", socket.c_str(), 1);
    wl_event_source* sources[] = {
        wl_event_loop_add_signal(s.loop(), SIGINT, on_signal, &s),
        wl_event_loop_add_signal(s.loop(), SIGTERM, on_signal, &s),
        wl_event_loop_add_signal(s.loop(), SIGCHLD, on_signal, &s),
        wl_event_loop_add_timer(s.loop(), on_duration, &s),
    };
    if (s.opt.duration_s > 0) wl_event_source_timer_update(sources[3], static_cast<int>(s.opt.duration_s * 1000));
    const holdings start{count_fds(), count_file_maps()};
    std::fprintf(stderr, "shm_compositor: %s on %s/%s\n", mode_name(s.opt.mode).data(), std::getenv("XDG_RUNTIME_DIR"),
                 socket.c_str());
    if (!s.opt.command.empty()) s.child.spawn(s.opt.command);
    run(s);
    s.shut_down();
    const auto fields = report(s, start, holdings{count_fds(), count_file_maps()});
    print_summary(fields);
    if (!s.opt.json.empty()) write_json(s.opt.json, fields);
    for (wl_event_source* source : sources)
        if (source != nullptr) wl_event_source_remove(source);
    return s.ended_at_duration ? 0 : s.child.status.value_or(0);
}

}  // namespace

int main(int argc, char** argv) {
    // Blocked before any thread starts (the reclaim worker), so only the event loop's signalfd sees them.
    sigset_t handled;
    sigemptyset(&handled);
    for (int signal : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&handled, signal);
    pthread_sigmask(SIG_BLOCK, &handled, nullptr);
    if (!install_sigbus_guard()) {
        std::perror("shm_compositor: sigaction(SIGBUS)");
        return 1;
    }
    try {
        return serve(parse_options(argc, argv));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shm_compositor: %s\n", e.what());
        return 1;
    }
}

// Expected output (shm_compositor --mode queue --duration 3 -- weston-simple-shm; figures vary):
//   shm_compositor: queue on /tmp/shm_compositor-XXXXXX/wayland-0
//   shm_compositor: mode="queue" hz=60 budget_us=1000 frames=178 missed_frames=0 ... clients=1
//     buffers_read=178 protocol_errors_sigbus=0 pools_created=1 pools_reclaimed=1 ... teardown_errors=0
//     ... fds_start=17 fds_end=17 file_maps_start=56 file_maps_end=56 client_status=143 ended_at_duration=true

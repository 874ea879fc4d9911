// stress_client: a Wayland client whose shm pools die the way large toolkit clients' do.
//
//   stress_client [--pool-mib N] [--width W] [--height H] [--burst N] [--resize-every N]
//                 [--frames N] [--duration S] [--linger S] [--prepare-ahead] [--json FILE]
//   stress_client --shrink [--frames N]
//
// Every frame it creates a pool (default 30 MiB), announces it at half size and grows it with
// wl_shm_pool.resize every --resize-every frames, draws a WxH XRGB buffer (default 2880x1800, 19.8
// MiB) from it, destroys the pool object and commits. Released buffers are destroyed --burst at a time
// (1: each as soon as it is released), so the compositor tears down that many pools at once: the
// shape that stalls compositors when Firefox or LibreOffice drop their pools. It measures the gaps
// between its frame callbacks (what a user sees as stutter) and prints p50/p99/max, and the longest
// time it spent on its own work for one frame (making and drawing the next pool). --json also splits
// the largest gap at the first destroy: the gaps before it (the window's first frames included) saw
// no pool torn down in the compositor, so they are the run's own control for a skipped frame
// (gaps_before_teardown: all of them when nothing was destroyed; gap_max_before_teardown_ms,
// gap_max_from_teardown_ms: null where a side has no gap).
//
// --prepare-ahead (needs --frames): makes and draws every frame's memory before the first frame, so a
// frame only announces a ready memfd. Use it to measure the compositor alone: on a VM whose balloon
// reports free pages to the host, first-touching 20 MiB costs the client itself up to ~80 ms at times,
// and that lands in its gaps whatever the compositor does. It holds --frames pools of memory and as
// many descriptors from the start (150 frames of 30 MiB: 4.4 GiB, 150 descriptors).
//
// --linger S: after the last frame, stays connected S seconds before the pools it still has go with
// the connection, so that a tracer on the compositor (tools/shm-teardown-trace) sees the burst apart
// from them.
//
// Every pool's memfd is sealed with F_SEAL_SHRINK: the kernel makes a udmabuf only of a memfd that
// carries that seal (drivers/dma-buf/udmabuf.c, SEALS_WANTED), so KWin 6.7's shm import through
// udmabuf (GpuManager::createUdmabuf) can engage for these pools wherever /dev/udmabuf exists. The
// seal forbids shrinking only: growing the file stays allowed, and wl_shm_pool.resize does not touch
// the file. --shrink leaves its memfd unsealed (it must truncate it).
//
// --shrink: commits a buffer whose memfd it has truncated to zero; the compositor must answer with a
// protocol error (wl_shm.error.invalid_fd) and live on: the client then reconnects and draws --frames
// frames. Exit status 0 when all of that happened.
//
// Exit status: 0 done; 1 cannot connect or set up; 3 protocol error (unexpected).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <wayland-client.h>
#include <xdg-shell-client-protocol.h>

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
    std::size_t pool_bytes = std::size_t{30} << 20;
    std::int32_t width = 1280;
    std::int32_t height = 720;
    std::size_t burst = 1;
    int resize_every = 4;
    long frames = 0;  // 0: until --duration or SIGTERM
    double duration_s = 0;
    double linger_s = 0;  // after the last frame, before the rest of the pools go with the connection
    std::string json;
    bool shrink = false;
    bool prepare_ahead = false;
    bool seal = true;  // F_SEAL_SHRINK on every memfd (off for --shrink, which must truncate one)
};

volatile std::sig_atomic_t stop_requested = 0;

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "stress_client: %s\nusage: stress_client [--pool-mib N] [--width W] [--height H] [--burst N]\n"
                 "    [--resize-every N] [--frames N] [--duration S] [--linger S] [--prepare-ahead] [--json FILE] [--shrink]\n",
                 why);
    std::exit(1);
}

options parse_options(int argc, char** argv) {
    options opt;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg == "--shrink" || arg == "--prepare-ahead") {
            (arg == "--shrink" ? opt.shrink : opt.prepare_ahead) = true;
            continue;
        }
        if (i + 1 >= argc) usage("missing value");
        const char* value = argv[++i];
        if (arg == "--pool-mib") opt.pool_bytes = std::strtoull(value, nullptr, 10) << 20;
        else if (arg == "--width") opt.width = std::atoi(value);
        else if (arg == "--height") opt.height = std::atoi(value);
        else if (arg == "--burst") opt.burst = std::strtoull(value, nullptr, 10);
        else if (arg == "--resize-every") opt.resize_every = std::atoi(value);
        else if (arg == "--frames") opt.frames = std::atol(value);
        else if (arg == "--duration") opt.duration_s = std::atof(value);
        else if (arg == "--linger") opt.linger_s = std::atof(value);
        else if (arg == "--json") opt.json = value;
        else usage("unknown option");
    }
    if (opt.width <= 0 || opt.height <= 0 || opt.burst == 0 || opt.pool_bytes == 0) usage("sizes must be positive");
    if (!(opt.linger_s >= 0)) usage("--linger must be >= 0");
    if (opt.shrink && opt.linger_s > 0) usage("--linger does not apply to --shrink");
    if (opt.prepare_ahead && opt.frames <= 0) usage("--prepare-ahead needs --frames");
    return opt;
}

// ---- one buffer and the client's side of its pool ----

struct client_buffer {
    wl_buffer* buffer = nullptr;
    int fd = -1;
    void* data = MAP_FAILED;
    std::size_t bytes = 0;
    bool released = false;
};

// ---- the connection ----

struct connection {
    const options& opt;
    wl_display* display = nullptr;
    wl_compositor* compositor = nullptr;
    wl_shm* shm = nullptr;
    xdg_wm_base* wm = nullptr;
    wl_surface* surface = nullptr;
    xdg_surface* xdg = nullptr;
    xdg_toplevel* toplevel = nullptr;
    bool configured = false;
    std::vector<client_buffer*> buffers;
    wl_callback* frame = nullptr;  // the frame callback asked for and not yet done
    long frames_drawn = 0;
    long frames_done = 0;
    clock_type::time_point last_done{};
    std::vector<double> gaps_ms;
    /// How many gaps were measured before the client first destroyed a buffer: those are the run's own
    /// control for a skipped frame, with no teardown in the compositor.
    std::optional<std::size_t> gaps_before_teardown;
    double work_max_ms = 0;       // the client's own longest frame: making, drawing, committing
    std::vector<int> prepared;    // --prepare-ahead: drawn memfds, the next frame's last
    bool failed = false;  // could not make a pool or buffer

    explicit connection(const options& o) : opt(o) {}
};

void destroy_buffer(client_buffer* b) {
    if (b->buffer != nullptr) wl_buffer_destroy(b->buffer);
    if (b->data != MAP_FAILED) ::munmap(b->data, b->bytes);
    if (b->fd >= 0) ::close(b->fd);
    delete b;
}

// Destroys released buffers once --burst of them wait, all in one go.
void destroy_released(connection& c, std::size_t at_least) {
    const auto released = std::count_if(c.buffers.begin(), c.buffers.end(), [](client_buffer* b) { return b->released; });
    if (static_cast<std::size_t>(released) < at_least || released == 0) return;
    if (!c.gaps_before_teardown) c.gaps_before_teardown = c.gaps_ms.size();
    std::erase_if(c.buffers, [](client_buffer* b) {
        if (!b->released) return false;
        destroy_buffer(b);
        return true;
    });
}

void on_buffer_release(void* data, wl_buffer*) {
    static_cast<client_buffer*>(data)->released = true;
}
const wl_buffer_listener buffer_listener = {.release = on_buffer_release};

// Touches every page, so the pool's memory really exists (as a drawn frame's would).
void draw(client_buffer& b, std::size_t bytes, long frame) {
    auto* pixels = static_cast<std::uint32_t*>(b.data);
    const std::size_t words_per_page = 4096 / sizeof(std::uint32_t);
    const auto colour = static_cast<std::uint32_t>(0xff000000u | static_cast<std::uint32_t>(frame * 0x010203));
    for (std::size_t i = 0; i < bytes / sizeof(std::uint32_t); i += words_per_page) pixels[i] = colour;
}

// A memfd of `pool_bytes` whose first stride x rows bytes are drawn, sealed against shrinking when
// `seal`; -1 (with a message) on failure.
int prepare_memory(std::size_t pool_bytes, std::int32_t stride, std::int32_t rows, long frame, bool seal) {
    client_buffer memory;
    memory.bytes = pool_bytes;
    memory.fd = ::memfd_create("stress_client-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    // fallocate and MAP_POPULATE allocate the pages in two calls rather than one fault per page, which
    // on a VM costs more than everything else the client does: the compositor's share is what is measured.
    if (memory.fd < 0 || ::ftruncate(memory.fd, static_cast<off_t>(pool_bytes)) != 0 ||
        ::fallocate(memory.fd, 0, 0, static_cast<off_t>(pool_bytes)) != 0 ||
        (seal && ::fcntl(memory.fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) ||
        (memory.data = ::mmap(nullptr, pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memory.fd, 0)) ==
            MAP_FAILED) {
        std::perror("stress_client: memfd pool");
        if (memory.fd >= 0) ::close(memory.fd);
        return -1;
    }
    draw(memory, static_cast<std::size_t>(stride) * static_cast<std::size_t>(rows), frame);
    // Drawn: the client needs only the fd now. Unmapping here, one pool per frame, keeps the client's
    // own teardown out of the burst, so the gaps it measures are the compositor's doing.
    ::munmap(memory.data, memory.bytes);
    return memory.fd;
}

std::int32_t rows_for(std::int32_t height, std::size_t pool_bytes, std::int32_t stride) {
    return std::min<std::int32_t>(height, static_cast<std::int32_t>(pool_bytes) / stride);
}

// The next frame's memory: prepared ahead, or made now.
int next_memory(connection& c, std::size_t pool_bytes, std::int32_t width, std::int32_t height) {
    if (!c.prepared.empty()) {
        const int fd = c.prepared.back();
        c.prepared.pop_back();
        return fd;
    }
    const std::int32_t stride = width * 4;
    return prepare_memory(pool_bytes, stride, rows_for(height, pool_bytes, stride), c.frames_drawn, c.opt.seal);
}

client_buffer* make_buffer(connection& c, std::size_t pool_bytes, std::int32_t width, std::int32_t height, bool resize) {
    const int fd = next_memory(c, pool_bytes, width, height);
    if (fd < 0) return nullptr;
    auto* b = new client_buffer;
    b->bytes = pool_bytes;
    b->fd = fd;
    const auto full = static_cast<std::int32_t>(pool_bytes);
    wl_shm_pool* pool = wl_shm_create_pool(c.shm, b->fd, resize ? full / 2 : full);
    if (resize) wl_shm_pool_resize(pool, full);
    const std::int32_t stride = width * 4;
    b->buffer = wl_shm_pool_create_buffer(pool, 0, width, rows_for(height, pool_bytes, stride), stride,
                                          WL_SHM_FORMAT_XRGB8888);
    wl_shm_pool_destroy(pool);  // the buffer keeps the pool alive in the compositor
    wl_buffer_add_listener(b->buffer, &buffer_listener, b);
    return b;
}

// Every frame's memory, drawn, before the first frame (--prepare-ahead).
bool prepare_all(connection& c) {
    const std::int32_t stride = c.opt.width * 4;
    const std::int32_t rows = rows_for(c.opt.height, c.opt.pool_bytes, stride);
    for (long frame = c.opt.frames - 1; frame >= 0; --frame) {
        const int fd = prepare_memory(c.opt.pool_bytes, stride, rows, frame, c.opt.seal);
        if (fd < 0) return false;
        c.prepared.push_back(fd);
    }
    return true;
}

void on_frame_done(void* data, wl_callback* callback, std::uint32_t);
const wl_callback_listener frame_listener = {.done = on_frame_done};

void commit_frame(connection& c, client_buffer* b) {
    c.buffers.push_back(b);
    wl_surface_attach(c.surface, b->buffer, 0, 0);
    wl_surface_damage(c.surface, 0, 0, INT32_MAX, INT32_MAX);
    c.frame = wl_surface_frame(c.surface);
    wl_callback_add_listener(c.frame, &frame_listener, &c);
    wl_surface_commit(c.surface);
    ++c.frames_drawn;
}

bool draw_next(connection& c) {
    const bool resize = c.opt.resize_every > 0 && c.frames_drawn % c.opt.resize_every == 0;
    client_buffer* b = make_buffer(c, c.opt.pool_bytes, c.opt.width, c.opt.height, resize);
    if (b == nullptr) return false;
    commit_frame(c, b);
    return true;
}

void on_frame_done(void* data, wl_callback* callback, std::uint32_t) {
    auto& c = *static_cast<connection*>(data);
    wl_callback_destroy(callback);
    c.frame = nullptr;
    const auto now = clock_type::now();
    if (c.frames_done++ > 0) c.gaps_ms.push_back(std::chrono::duration<double, std::milli>(now - c.last_done).count());
    c.last_done = now;
    destroy_released(c, c.opt.burst);
    const bool more = c.opt.frames == 0 || c.frames_drawn < c.opt.frames;
    if (more && !draw_next(c)) c.failed = true;
    c.work_max_ms = std::max(c.work_max_ms, std::chrono::duration<double, std::milli>(clock_type::now() - now).count());
}

// ---- setup ----

void on_ping(void*, xdg_wm_base* wm, std::uint32_t serial) { xdg_wm_base_pong(wm, serial); }
const xdg_wm_base_listener wm_listener = {.ping = on_ping};

void on_xdg_configure(void* data, xdg_surface* xdg, std::uint32_t serial) {
    xdg_surface_ack_configure(xdg, serial);
    static_cast<connection*>(data)->configured = true;
}
const xdg_surface_listener xdg_listener = {.configure = on_xdg_configure};

void on_toplevel_configure(void*, xdg_toplevel*, std::int32_t, std::int32_t, wl_array*) {}
void on_toplevel_close(void*, xdg_toplevel*) { stop_requested = 1; }
// Value-initialised first: later xdg-shell versions add events, never sent at the v1 bound here.
xdg_toplevel_listener make_toplevel_listener() {
    xdg_toplevel_listener listener{};
    listener.configure = on_toplevel_configure;
    listener.close = on_toplevel_close;
    return listener;
}
const xdg_toplevel_listener toplevel_listener = make_toplevel_listener();

void on_global(void* data, wl_registry* registry, std::uint32_t name, const char* interface, std::uint32_t) {
    auto& c = *static_cast<connection*>(data);
    const std::string_view what = interface;
    if (what == wl_compositor_interface.name)
        c.compositor = static_cast<wl_compositor*>(wl_registry_bind(registry, name, &wl_compositor_interface, 1));
    else if (what == wl_shm_interface.name)
        c.shm = static_cast<wl_shm*>(wl_registry_bind(registry, name, &wl_shm_interface, 1));
    else if (what == xdg_wm_base_interface.name) {
        c.wm = static_cast<xdg_wm_base*>(wl_registry_bind(registry, name, &xdg_wm_base_interface, 1));
        xdg_wm_base_add_listener(c.wm, &wm_listener, &c);
    }
}
void on_global_remove(void*, wl_registry*, std::uint32_t) {}
const wl_registry_listener registry_listener = {.global = on_global, .global_remove = on_global_remove};

// Connects, makes a configured toplevel. False (with a message) when the compositor lacks something.
bool set_up(connection& c) {
    c.display = wl_display_connect(nullptr);
    if (c.display == nullptr) {
        std::perror("stress_client: wl_display_connect");
        return false;
    }
    wl_registry* registry = wl_display_get_registry(c.display);
    wl_registry_add_listener(registry, &registry_listener, &c);
    wl_display_roundtrip(c.display);
    wl_registry_destroy(registry);
    if (c.compositor == nullptr || c.shm == nullptr || c.wm == nullptr) {
        std::fprintf(stderr, "stress_client: the compositor lacks wl_compositor, wl_shm or xdg_wm_base\n");
        return false;
    }
    c.surface = wl_compositor_create_surface(c.compositor);
    c.xdg = xdg_wm_base_get_xdg_surface(c.wm, c.surface);
    xdg_surface_add_listener(c.xdg, &xdg_listener, &c);
    c.toplevel = xdg_surface_get_toplevel(c.xdg);
    xdg_toplevel_add_listener(c.toplevel, &toplevel_listener, &c);
    xdg_toplevel_set_title(c.toplevel, "stress_client");
    wl_surface_commit(c.surface);
    while (!c.configured)
        if (wl_display_dispatch(c.display) < 0) return false;
    return true;
}

void tear_down(connection& c) {
    for (client_buffer* b : c.buffers) destroy_buffer(b);
    c.buffers.clear();
    for (int fd : c.prepared) ::close(fd);
    c.prepared.clear();
    if (c.frame != nullptr) wl_callback_destroy(c.frame);
    if (c.toplevel != nullptr) xdg_toplevel_destroy(c.toplevel);
    if (c.xdg != nullptr) xdg_surface_destroy(c.xdg);
    if (c.surface != nullptr) wl_surface_destroy(c.surface);
    if (c.wm != nullptr) xdg_wm_base_destroy(c.wm);
    if (c.shm != nullptr) wl_shm_destroy(c.shm);
    if (c.compositor != nullptr) wl_compositor_destroy(c.compositor);
    if (c.display != nullptr) wl_display_disconnect(c.display);
}

// ---- the event loop ----

enum class outcome { done, protocol_error, io_error, setup_failed };

// Reports the protocol error, if that is what ended the connection.
outcome connection_error(connection& c) {
    if (wl_display_get_error(c.display) != EPROTO) {
        std::fprintf(stderr, "stress_client: connection lost: %s\n", std::strerror(wl_display_get_error(c.display)));
        return outcome::io_error;
    }
    const wl_interface* interface = nullptr;
    std::uint32_t id = 0;
    const std::uint32_t code = wl_display_get_protocol_error(c.display, &interface, &id);
    std::fprintf(stderr, "stress_client: protocol error %u on %s@%u\n", code, interface ? interface->name : "?", id);
    return outcome::protocol_error;
}

// Dispatches until `finished` says so, SIGTERM/SIGINT, or the deadline. Polls with a short timeout so
// a signal is seen promptly (libwayland's own dispatch restarts poll on EINTR).
template <class Finished>
outcome dispatch_until(connection& c, clock_type::time_point deadline, Finished finished) {
    while (!finished() && !stop_requested && clock_type::now() < deadline) {
        while (wl_display_prepare_read(c.display) != 0)
            if (wl_display_dispatch_pending(c.display) < 0) return connection_error(c);
        wl_display_flush(c.display);
        pollfd pfd{wl_display_get_fd(c.display), POLLIN, 0};
        if (::poll(&pfd, 1, 50) > 0) {
            if (wl_display_read_events(c.display) < 0) return connection_error(c);
        } else {
            wl_display_cancel_read(c.display);
        }
        if (wl_display_dispatch_pending(c.display) < 0) return connection_error(c);
    }
    return c.failed ? outcome::setup_failed : outcome::done;
}

clock_type::time_point deadline_after(double seconds) {
    if (seconds <= 0) return clock_type::time_point::max();
    return clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
}

outcome run_frames(connection& c, long frames, double duration_s) {
    if (!set_up(c)) return outcome::setup_failed;
    if (c.opt.prepare_ahead && !prepare_all(c)) return outcome::setup_failed;
    if (!draw_next(c)) return outcome::setup_failed;
    return dispatch_until(c, deadline_after(duration_s), [&] { return frames > 0 && c.frames_done >= frames; });
}

// ---- --shrink ----

// One small buffer whose memfd is cut to nothing after the compositor mapped it.
outcome commit_truncated(connection& c) {
    if (!set_up(c)) return outcome::setup_failed;
    client_buffer* b = make_buffer(c, std::size_t{1} << 20, 256, 256, false);
    if (b == nullptr) return outcome::setup_failed;
    wl_display_roundtrip(c.display);  // the compositor has mapped the pool
    if (::ftruncate(b->fd, 0) != 0) return outcome::setup_failed;
    commit_frame(c, b);
    return dispatch_until(c, deadline_after(5), [] { return false; });
}

int run_shrink(const options& opt) {
    options unsealed = opt;
    unsealed.seal = false;
    connection first{unsealed};
    const outcome cut = commit_truncated(first);
    const wl_interface* interface = nullptr;
    const bool expected = cut == outcome::protocol_error &&
                          wl_display_get_protocol_error(first.display, &interface, nullptr) == WL_SHM_ERROR_INVALID_FD &&
                          interface == &wl_buffer_interface;
    tear_down(first);
    std::printf("stress_client: truncated pool: %s\n", expected ? "protocol error wl_shm.invalid_fd on wl_buffer, as expected"
                                                                : "NO protocol error");
    connection second{opt};
    const outcome after = run_frames(second, opt.frames > 0 ? opt.frames : 10, 10);
    std::printf("stress_client: reconnected and drew %ld frames: %s\n", second.frames_done,
                after == outcome::done ? "ok" : "FAILED");
    tear_down(second);
    return expected && after == outcome::done ? 0 : 3;
}

// ---- the report ----

double quantile(std::vector<double> sorted, double q) {
    if (sorted.empty()) return 0;
    std::sort(sorted.begin(), sorted.end());
    const auto rank = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
    return sorted[std::min(rank, sorted.size() - 1)];
}

// The largest of gaps [from, to) as JSON: null where there are none.
std::string json_max(const std::vector<double>& gaps, std::size_t from, std::size_t to) {
    if (from >= to) return "null";
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", *std::max_element(gaps.begin() + static_cast<std::ptrdiff_t>(from),
                                                               gaps.begin() + static_cast<std::ptrdiff_t>(to)));
    return text;
}

void report(const connection& c, outcome result, const options& opt) {
    const double p50 = quantile(c.gaps_ms, 0.5);
    const double p99 = quantile(c.gaps_ms, 0.99);
    const double max = c.gaps_ms.empty() ? 0 : *std::max_element(c.gaps_ms.begin(), c.gaps_ms.end());
    const std::size_t before = c.gaps_before_teardown.value_or(c.gaps_ms.size());
    const bool protocol_error = result == outcome::protocol_error;
    std::printf("stress_client: %ld frames, frame-callback gaps p50 %.1f ms, p99 %.1f ms, max %.1f ms, own work max %.1f ms, "
                "protocol error: %s\n",
                c.frames_done, p50, p99, max, c.work_max_ms, protocol_error ? "yes" : "no");
    if (opt.json.empty()) return;
    std::ofstream out(opt.json);
    char text[768];
    std::snprintf(text, sizeof text,
                  "{\n  \"frames\": %ld,\n  \"gap_p50_ms\": %.2f,\n  \"gap_p99_ms\": %.2f,\n  \"gap_max_ms\": %.2f,\n"
                  "  \"gaps_before_teardown\": %zu,\n  \"gap_max_before_teardown_ms\": %s,\n"
                  "  \"gap_max_from_teardown_ms\": %s,\n"
                  "  \"client_work_max_ms\": %.2f,\n  \"prepared_ahead\": %s,\n"
                  "  \"pool_bytes\": %zu,\n  \"burst\": %zu,\n  \"protocol_error\": %s\n}\n",
                  c.frames_done, p50, p99, max, before, json_max(c.gaps_ms, 0, before).c_str(),
                  json_max(c.gaps_ms, before, c.gaps_ms.size()).c_str(), c.work_max_ms, opt.prepare_ahead ? "true" : "false", opt.pool_bytes,
                  opt.burst, protocol_error ? "true" : "false");
    out << text;
}

void on_stop_signal(int) { stop_requested = 1; }

}  // namespace

int main(int argc, char** argv) {
    const options opt = parse_options(argc, argv);
    struct sigaction action {};
    action.sa_handler = on_stop_signal;  // no SA_RESTART: poll returns at once
    ::sigaction(SIGTERM, &action, nullptr);
    ::sigaction(SIGINT, &action, nullptr);
    if (opt.shrink) return run_shrink(opt);

    connection c{opt};
    outcome result = run_frames(c, opt.frames, opt.duration_s);
    // A tracer on the compositor then sees the burst apart from the pools the exit drops.
    if (result == outcome::done && opt.linger_s > 0) result = dispatch_until(c, deadline_after(opt.linger_s), [] { return false; });
    report(c, result, opt);
    if (result == outcome::done) {
        destroy_released(c, 1);
        wl_display_roundtrip(c.display);
    }
    tear_down(c);
    switch (result) {
    case outcome::done: return 0;
    case outcome::protocol_error: return 3;
    default: return 1;
    }
}

// Expected output (shm_compositor --mode queue+worker -- stress_client --burst 26 --duration 6; figures vary):
//   stress_client: 95 frames, frame-callback gaps p50 64.0 ms, p99 122.3 ms, max 132.0 ms, protocol error: no
// and with --shrink:
//   stress_client: truncated pool: protocol error wl_shm.invalid_fd on wl_buffer, as expected
//   stress_client: reconnected and drew 10 frames: ok

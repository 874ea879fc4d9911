// surfaces.hpp - the scene: wl_compositor, wl_surface, xdg-shell toplevels and one headless wl_output.
//
// Enough of each protocol for ordinary clients (weston-simple-shm, stress_client): surfaces attach,
// damage and commit shm buffers and ask for frame callbacks; an xdg_toplevel gets its configure on the
// first commit. Nothing is shown and there is no input, so damage, regions, titles and window-management
// requests are accepted and have no effect. xdg_popup is not offered (a client asking for one gets an
// implementation error). "Rendering" reads every page of each newly committed buffer, then releases it
// and sends the frame callbacks. Main thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <wayland-server-core.h>

namespace shm_compositor {

struct surface;

struct output_mode {
    std::int32_t width = 1920;
    std::int32_t height = 1080;
    std::int32_t refresh_mhz = 60000;
};

class scene {
public:
    /// Creates the wl_compositor (v4), xdg_wm_base (v1) and wl_output (v3) globals. Throws
    /// std::runtime_error if it cannot. Must outlive every client (destroy clients first).
    scene(wl_display* display, output_mode mode);
    ~scene();
    scene(const scene&) = delete;
    scene& operator=(const scene&) = delete;

    /// Called when a commit needs a repaint (a new buffer or a frame callback).
    void on_repaint_needed(std::function<void()> callback) { repaint_needed_ = std::move(callback); }

    /// One headless frame: reads each newly committed buffer, releases it, sends the frame callbacks
    /// with `time_ms`. Cost: one word per buffer page (plus a minor fault per page on first touch).
    void repaint(std::uint32_t time_ms) noexcept;

    [[nodiscard]] std::uint64_t buffers_read() const noexcept { return buffers_read_; }
    [[nodiscard]] std::uint64_t checksum() const noexcept { return checksum_; }
    [[nodiscard]] output_mode mode() const noexcept { return mode_; }

    // For the surfaces this scene creates.
    void add(surface* s) { surfaces_.push_back(s); }
    void remove(surface* s) noexcept;
    void request_repaint() {
        if (repaint_needed_) repaint_needed_();
    }

private:
    void destroy_globals() noexcept;

    std::vector<wl_global*> globals_;
    std::vector<surface*> surfaces_;
    std::function<void()> repaint_needed_;
    output_mode mode_;
    std::uint64_t buffers_read_ = 0;
    std::uint64_t checksum_ = 0;
};

}  // namespace shm_compositor

// surfaces.cpp - wl_compositor, wl_surface, wl_region, xdg_wm_base/xdg_surface/xdg_toplevel, wl_output.
#include "surfaces.hpp"

#include <algorithm>
#include <new>
#include <stdexcept>

#include <wayland-server-protocol.h>
#include <xdg-shell-server-protocol.h>

#include "shm.hpp"

namespace shm_compositor {

namespace {

// A wl_buffer a surface points at, forgotten if the client destroys it first. Standard layout with
// the listener first, so the destroy notification can get back to the reference.
struct buffer_ref {
    wl_listener listener{};
    wl_resource* buffer = nullptr;

    static void forget(wl_listener* listener, void*) {
        auto* ref = reinterpret_cast<buffer_ref*>(listener);
        wl_list_remove(&ref->listener.link);
        ref->buffer = nullptr;
    }
    void set(wl_resource* fresh) noexcept {
        clear();
        if (fresh == nullptr) return;
        buffer = fresh;
        listener.notify = forget;
        wl_resource_add_destroy_listener(fresh, &listener);
    }
    void clear() noexcept {
        if (buffer != nullptr) wl_list_remove(&listener.link);
        buffer = nullptr;
    }
};

}  // namespace

struct surface {
    scene& owner;
    wl_resource* resource;
    buffer_ref pending;        // attached, not yet committed
    bool attached = false;
    wl_list pending_frames{};  // wl_callback links
    buffer_ref current;        // committed and not yet read by a repaint
    wl_list frames{};          // committed frame callbacks, sent by the next repaint
    wl_resource* xdg = nullptr;
    wl_resource* toplevel = nullptr;
    bool configured = false;
    std::uint32_t configure_serial = 0;

    surface(scene& s, wl_resource* r) : owner(s), resource(r) {
        wl_list_init(&pending_frames);
        wl_list_init(&frames);
    }
};

namespace {

surface* surface_of(wl_resource* resource) { return static_cast<surface*>(wl_resource_get_user_data(resource)); }

void destroy_resource(wl_client*, wl_resource* resource) { wl_resource_destroy(resource); }

void destroy_callbacks(wl_list* callbacks) {
    wl_resource* callback = nullptr;
    wl_resource* next = nullptr;
    wl_resource_for_each_safe(callback, next, callbacks) wl_resource_destroy(callback);
}

void send_frame_done(wl_list* callbacks, std::uint32_t time_ms) {
    wl_resource* callback = nullptr;
    wl_resource* next = nullptr;
    wl_resource_for_each_safe(callback, next, callbacks) {
        wl_callback_send_done(callback, time_ms);
        wl_resource_destroy(callback);
    }
}

// ---- xdg_toplevel, xdg_surface, xdg_positioner, xdg_wm_base ----

// The first commit of a toplevel gets its configure: size 0x0, the client picks, no states.
void send_initial_configure(surface& s) {
    if (s.toplevel == nullptr || s.configured) return;
    wl_array states;
    wl_array_init(&states);
    xdg_toplevel_send_configure(s.toplevel, 0, 0, &states);
    wl_array_release(&states);
    s.configure_serial = wl_display_next_serial(wl_client_get_display(wl_resource_get_client(s.resource)));
    xdg_surface_send_configure(s.xdg, s.configure_serial);
    s.configured = true;
}

// A headless output with no window management: these requests have nothing to act on.
const struct xdg_toplevel_interface toplevel_impl = {
    .destroy = destroy_resource,
    .set_parent = [](wl_client*, wl_resource*, wl_resource*) {},
    .set_title = [](wl_client*, wl_resource*, const char*) {},
    .set_app_id = [](wl_client*, wl_resource*, const char*) {},
    .show_window_menu = [](wl_client*, wl_resource*, wl_resource*, std::uint32_t, std::int32_t, std::int32_t) {},
    .move = [](wl_client*, wl_resource*, wl_resource*, std::uint32_t) {},
    .resize = [](wl_client*, wl_resource*, wl_resource*, std::uint32_t, std::uint32_t) {},
    .set_max_size = [](wl_client*, wl_resource*, std::int32_t, std::int32_t) {},
    .set_min_size = [](wl_client*, wl_resource*, std::int32_t, std::int32_t) {},
    .set_maximized = [](wl_client*, wl_resource*) {},
    .unset_maximized = [](wl_client*, wl_resource*) {},
    .set_fullscreen = [](wl_client*, wl_resource*, wl_resource*) {},
    .unset_fullscreen = [](wl_client*, wl_resource*) {},
    .set_minimized = [](wl_client*, wl_resource*) {},
};

void toplevel_destroyed(wl_resource* resource) {
    if (surface* s = surface_of(resource)) s->toplevel = nullptr;
}

void xdg_surface_get_toplevel(wl_client* client, wl_resource* resource, std::uint32_t id) {
    surface* s = surface_of(resource);
    if (s == nullptr) return wl_resource_post_error(resource, XDG_WM_BASE_ERROR_DEFUNCT_SURFACES, "wl_surface is gone");
    if (s->toplevel != nullptr) return wl_resource_post_error(resource, XDG_WM_BASE_ERROR_ROLE, "already a toplevel");
    wl_resource* toplevel = wl_resource_create(client, &xdg_toplevel_interface, wl_resource_get_version(resource), id);
    if (toplevel == nullptr) return wl_client_post_no_memory(client);
    wl_resource_set_implementation(toplevel, &toplevel_impl, s, toplevel_destroyed);
    s->toplevel = toplevel;
}

void xdg_surface_ack_configure(wl_client*, wl_resource* resource, std::uint32_t serial) {
    surface* s = surface_of(resource);
    if (s != nullptr && serial != s->configure_serial)
        wl_resource_post_error(resource, XDG_SURFACE_ERROR_INVALID_SERIAL, "unknown configure serial %u", serial);
}

const struct xdg_surface_interface xdg_surface_impl = {
    .destroy = destroy_resource,
    .get_toplevel = xdg_surface_get_toplevel,
    .get_popup = [](wl_client* client, wl_resource*, std::uint32_t, wl_resource*, wl_resource*) {
        wl_client_post_implementation_error(client, "shm_compositor does not offer xdg_popup");
    },
    .set_window_geometry = [](wl_client*, wl_resource*, std::int32_t, std::int32_t, std::int32_t, std::int32_t) {},
    .ack_configure = xdg_surface_ack_configure,
};

void xdg_surface_destroyed(wl_resource* resource) {
    if (surface* s = surface_of(resource)) {
        s->xdg = nullptr;
        s->configured = false;
    }
}

// Positioners only place popups, which are not offered; a client may still make one. Value-initialised
// first: later versions add requests, never called at the v1 xdg_wm_base offered here.
struct xdg_positioner_interface make_positioner_impl() {
    struct xdg_positioner_interface impl{};
    impl.destroy = destroy_resource;
    impl.set_size = [](wl_client*, wl_resource*, std::int32_t, std::int32_t) {};
    impl.set_anchor_rect = [](wl_client*, wl_resource*, std::int32_t, std::int32_t, std::int32_t, std::int32_t) {};
    impl.set_anchor = [](wl_client*, wl_resource*, std::uint32_t) {};
    impl.set_gravity = [](wl_client*, wl_resource*, std::uint32_t) {};
    impl.set_constraint_adjustment = [](wl_client*, wl_resource*, std::uint32_t) {};
    impl.set_offset = [](wl_client*, wl_resource*, std::int32_t, std::int32_t) {};
    return impl;
}
const struct xdg_positioner_interface positioner_impl = make_positioner_impl();

void wm_create_positioner(wl_client* client, wl_resource* resource, std::uint32_t id) {
    wl_resource* positioner = wl_resource_create(client, &xdg_positioner_interface, wl_resource_get_version(resource), id);
    if (positioner == nullptr) return wl_client_post_no_memory(client);
    wl_resource_set_implementation(positioner, &positioner_impl, nullptr, nullptr);
}

void wm_get_xdg_surface(wl_client* client, wl_resource* resource, std::uint32_t id, wl_resource* surface_resource) {
    surface* s = surface_of(surface_resource);
    if (s->xdg != nullptr) return wl_resource_post_error(resource, XDG_WM_BASE_ERROR_ROLE, "already an xdg_surface");
    wl_resource* xdg = wl_resource_create(client, &xdg_surface_interface, wl_resource_get_version(resource), id);
    if (xdg == nullptr) return wl_client_post_no_memory(client);
    wl_resource_set_implementation(xdg, &xdg_surface_impl, s, xdg_surface_destroyed);
    s->xdg = xdg;
}

const struct xdg_wm_base_interface wm_impl = {
    .destroy = destroy_resource,
    .create_positioner = wm_create_positioner,
    .get_xdg_surface = wm_get_xdg_surface,
    .pong = [](wl_client*, wl_resource*, std::uint32_t) {},  // never pings: nothing to time out
};

void bind_wm(wl_client* client, void*, std::uint32_t version, std::uint32_t id) {
    wl_resource* resource = wl_resource_create(client, &xdg_wm_base_interface, static_cast<int>(version), id);
    if (resource == nullptr) return wl_client_post_no_memory(client);
    wl_resource_set_implementation(resource, &wm_impl, nullptr, nullptr);
}

// ---- wl_surface ----

void surface_attach(wl_client*, wl_resource* resource, wl_resource* buffer, std::int32_t, std::int32_t) {
    surface* s = surface_of(resource);
    if (buffer != nullptr && !is_shm_buffer(buffer))
        return wl_client_post_implementation_error(wl_resource_get_client(resource), "only wl_shm buffers are supported");
    s->pending.set(buffer);
    s->attached = true;
}

void surface_frame(wl_client* client, wl_resource* resource, std::uint32_t id) {
    surface* s = surface_of(resource);
    wl_resource* callback = wl_resource_create(client, &wl_callback_interface, 1, id);
    if (callback == nullptr) return wl_client_post_no_memory(client);
    wl_resource_set_implementation(callback, nullptr, nullptr,
                                   [](wl_resource* r) { wl_list_remove(wl_resource_get_link(r)); });
    wl_list_insert(s->pending_frames.prev, wl_resource_get_link(callback));
}

// A buffer replaced before any repaint read it is released unread, as a compositor that skips a frame does.
void commit_buffer(surface& s) {
    if (!s.attached) return;
    if (s.current.buffer != nullptr && s.current.buffer != s.pending.buffer) wl_buffer_send_release(s.current.buffer);
    s.current.set(s.pending.buffer);
    s.pending.clear();
    s.attached = false;
}

void surface_commit(wl_client*, wl_resource* resource) {
    surface* s = surface_of(resource);
    if (s->xdg != nullptr && !s->configured && s->attached && s->pending.buffer != nullptr)
        return wl_resource_post_error(s->xdg, XDG_SURFACE_ERROR_UNCONFIGURED_BUFFER, "buffer committed before configure");
    const bool new_content = s->attached && s->pending.buffer != nullptr;
    commit_buffer(*s);
    const bool wants_frame = !wl_list_empty(&s->pending_frames);
    wl_list_insert_list(s->frames.prev, &s->pending_frames);
    wl_list_init(&s->pending_frames);
    send_initial_configure(*s);
    if (new_content || wants_frame) s->owner.request_repaint();
}

// Value-initialised first: later versions add requests, never called at the v4 wl_compositor offered here.
struct wl_surface_interface make_surface_impl() {
    struct wl_surface_interface impl{};
    impl.destroy = destroy_resource;
    impl.attach = surface_attach;
    impl.damage = [](wl_client*, wl_resource*, std::int32_t, std::int32_t, std::int32_t, std::int32_t) {};
    impl.frame = surface_frame;
    impl.set_opaque_region = [](wl_client*, wl_resource*, wl_resource*) {};
    impl.set_input_region = [](wl_client*, wl_resource*, wl_resource*) {};
    impl.commit = surface_commit;
    impl.set_buffer_transform = [](wl_client*, wl_resource*, std::int32_t) {};
    impl.set_buffer_scale = [](wl_client*, wl_resource*, std::int32_t) {};
    impl.damage_buffer = [](wl_client*, wl_resource*, std::int32_t, std::int32_t, std::int32_t, std::int32_t) {};
    return impl;
}
const struct wl_surface_interface surface_impl = make_surface_impl();

void surface_destroyed(wl_resource* resource) {
    surface* s = surface_of(resource);
    if (s->xdg != nullptr) wl_resource_set_user_data(s->xdg, nullptr);
    if (s->toplevel != nullptr) wl_resource_set_user_data(s->toplevel, nullptr);
    s->pending.clear();
    s->current.clear();
    destroy_callbacks(&s->pending_frames);
    destroy_callbacks(&s->frames);
    s->owner.remove(s);
    delete s;
}

// ---- wl_region, wl_compositor ----

const struct wl_region_interface region_impl = {
    .destroy = destroy_resource,
    .add = [](wl_client*, wl_resource*, std::int32_t, std::int32_t, std::int32_t, std::int32_t) {},
    .subtract = [](wl_client*, wl_resource*, std::int32_t, std::int32_t, std::int32_t, std::int32_t) {},
};

void compositor_create_surface(wl_client* client, wl_resource* resource, std::uint32_t id) {
    auto& owner = *static_cast<scene*>(wl_resource_get_user_data(resource));
    wl_resource* surface_resource = wl_resource_create(client, &wl_surface_interface, wl_resource_get_version(resource), id);
    auto* s = surface_resource ? new (std::nothrow) surface(owner, surface_resource) : nullptr;
    if (s == nullptr) {
        if (surface_resource != nullptr) wl_resource_destroy(surface_resource);
        return wl_client_post_no_memory(client);
    }
    wl_resource_set_implementation(surface_resource, &surface_impl, s, surface_destroyed);
    owner.add(s);
}

void compositor_create_region(wl_client* client, wl_resource* resource, std::uint32_t id) {
    wl_resource* region = wl_resource_create(client, &wl_region_interface, wl_resource_get_version(resource), id);
    if (region == nullptr) return wl_client_post_no_memory(client);
    wl_resource_set_implementation(region, &region_impl, nullptr, nullptr);
}

// Value-initialised first: later versions add requests (libwayland 1.26's wl_compositor.release),
// never called at the v4 wl_compositor offered here.
struct wl_compositor_interface make_compositor_impl() {
    struct wl_compositor_interface impl{};
    impl.create_surface = compositor_create_surface;
    impl.create_region = compositor_create_region;
    return impl;
}
const struct wl_compositor_interface compositor_impl = make_compositor_impl();

void bind_compositor(wl_client* client, void* data, std::uint32_t version, std::uint32_t id) {
    wl_resource* resource = wl_resource_create(client, &wl_compositor_interface, static_cast<int>(version), id);
    if (resource == nullptr) return wl_client_post_no_memory(client);
    wl_resource_set_implementation(resource, &compositor_impl, data, nullptr);
}

// ---- wl_output ----

const struct wl_output_interface output_impl = {.release = destroy_resource};

void bind_output(wl_client* client, void* data, std::uint32_t version, std::uint32_t id) {
    const output_mode mode = static_cast<scene*>(data)->mode();
    wl_resource* resource = wl_resource_create(client, &wl_output_interface, static_cast<int>(version), id);
    if (resource == nullptr) return wl_client_post_no_memory(client);
    wl_resource_set_implementation(resource, &output_impl, nullptr, nullptr);
    wl_output_send_geometry(resource, 0, 0, 0, 0, WL_OUTPUT_SUBPIXEL_UNKNOWN, "deferred_unmap", "headless",
                            WL_OUTPUT_TRANSFORM_NORMAL);
    wl_output_send_mode(resource, WL_OUTPUT_MODE_CURRENT | WL_OUTPUT_MODE_PREFERRED, mode.width, mode.height,
                        mode.refresh_mhz);
    if (version >= WL_OUTPUT_SCALE_SINCE_VERSION) wl_output_send_scale(resource, 1);
    if (version >= WL_OUTPUT_DONE_SINCE_VERSION) wl_output_send_done(resource);
}

}  // namespace

scene::scene(wl_display* display, output_mode mode) : mode_(mode) {
    globals_ = {
        wl_global_create(display, &wl_compositor_interface, 4, this, bind_compositor),
        wl_global_create(display, &xdg_wm_base_interface, 1, this, bind_wm),
        wl_global_create(display, &wl_output_interface, 3, this, bind_output),
    };
    if (std::find(globals_.begin(), globals_.end(), nullptr) != globals_.end()) {
        destroy_globals();
        throw std::runtime_error("wl_global_create failed");
    }
}

scene::~scene() { destroy_globals(); }

void scene::destroy_globals() noexcept {
    for (wl_global* global : globals_)
        if (global != nullptr) wl_global_destroy(global);
    globals_.clear();
}

void scene::remove(surface* s) noexcept { std::erase(surfaces_, s); }

void scene::repaint(std::uint32_t time_ms) noexcept {
    for (surface* s : surfaces_) {
        if (s->current.buffer == nullptr) continue;
        wl_resource* buffer = s->current.buffer;
        s->current.clear();
        std::uint64_t sum = 0;
        if (!read_shm_buffer(buffer, sum)) continue;  // a protocol error is on its way to the client
        ++buffers_read_;
        checksum_ += sum;
        wl_buffer_send_release(buffer);
    }
    for (surface* s : surfaces_) send_frame_done(&s->frames, time_ms);
}

}  // namespace shm_compositor

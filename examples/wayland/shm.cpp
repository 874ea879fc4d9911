// shm.cpp - wl_shm, wl_shm_pool and wl_buffer on deferred_unmap handles.
#include "shm.hpp"

#include <climits>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <sys/mman.h>
#include <wayland-server-protocol.h>

#include "sigbus_guard.hpp"

namespace shm_compositor {

namespace du = deferred_unmap;

namespace {

// Shared by the wl_shm_pool object and its buffers; retired when the last of them is gone.
struct shm_pool {
    shm_global& shm;
    du::shm_region region;
    std::int32_t size = 0;  // what the client declared (the mapping's length)
    int buffers = 0;
    bool object_alive = true;
    bool unreadable = false;  // a read hit SIGBUS: never read this pool again
};

struct shm_buffer {
    shm_pool* pool;
    std::int32_t offset;
    std::int32_t height;
    std::int32_t stride;
};

void release_pool_ref(shm_pool* pool) noexcept {
    if (pool->object_alive || pool->buffers > 0) return;
    pool->shm.reclaim().retire(std::move(pool->region));
    delete pool;
}

// ---- wl_buffer ----

void buffer_destroy_request(wl_client*, wl_resource* resource) { wl_resource_destroy(resource); }

const struct wl_buffer_interface buffer_impl = {.destroy = buffer_destroy_request};

void buffer_destroyed(wl_resource* resource) {
    auto* buffer = static_cast<shm_buffer*>(wl_resource_get_user_data(resource));
    shm_pool* pool = buffer->pool;
    delete buffer;
    --pool->buffers;
    release_pool_ref(pool);
}

// ---- wl_shm_pool ----

bool valid_format(std::uint32_t format) noexcept {
    return format == WL_SHM_FORMAT_ARGB8888 || format == WL_SHM_FORMAT_XRGB8888;
}

// The checks libwayland's wl_shm makes: the buffer lies inside the pool, without overflow.
bool valid_geometry(const shm_pool& pool, std::int32_t offset, std::int32_t width, std::int32_t height,
                    std::int32_t stride) noexcept {
    if (offset < 0 || width <= 0 || height <= 0 || stride < width || INT32_MAX / stride <= height) return false;
    return offset <= pool.size - stride * height;
}

void pool_create_buffer(wl_client* client, wl_resource* resource, std::uint32_t id, std::int32_t offset,
                        std::int32_t width, std::int32_t height, std::int32_t stride, std::uint32_t format) {
    auto* pool = static_cast<shm_pool*>(wl_resource_get_user_data(resource));
    if (!valid_format(format))
        return wl_resource_post_error(resource, WL_SHM_ERROR_INVALID_FORMAT, "invalid format 0x%x", format);
    if (!valid_geometry(*pool, offset, width, height, stride))
        return wl_resource_post_error(resource, WL_SHM_ERROR_INVALID_STRIDE,
                                      "invalid width, height or stride (%dx%d, %d)", width, height, stride);
    auto* buffer = new (std::nothrow) shm_buffer{pool, offset, height, stride};
    wl_resource* buffer_resource = buffer ? wl_resource_create(client, &wl_buffer_interface, 1, id) : nullptr;
    if (buffer_resource == nullptr) {
        delete buffer;
        return wl_client_post_no_memory(client);
    }
    wl_resource_set_implementation(buffer_resource, &buffer_impl, buffer, buffer_destroyed);
    ++pool->buffers;
    ++pool->shm.counters().buffers_created;
}

void pool_destroy_request(wl_client*, wl_resource* resource) { wl_resource_destroy(resource); }

void pool_resize(wl_client*, wl_resource* resource, std::int32_t size) {
    auto* pool = static_cast<shm_pool*>(wl_resource_get_user_data(resource));
    if (size < pool->size) return wl_resource_post_error(resource, WL_SHM_ERROR_INVALID_FD, "shrinking pool invalid");
    if (size == pool->size) return;
    std::error_code ec;
    du::mapping old_view = pool->region.resize(static_cast<std::size_t>(size), PROT_READ, MAP_SHARED, ec);
    if (ec) return wl_resource_post_error(resource, WL_SHM_ERROR_INVALID_FD, "failed mmap fd: %s", ec.message().c_str());
    pool->size = size;
    ++pool->shm.counters().resizes;
    pool->shm.reclaim().retire(std::move(old_view));
}

const struct wl_shm_pool_interface pool_impl = {
    .create_buffer = pool_create_buffer,
    .destroy = pool_destroy_request,
    .resize = pool_resize,
};

void pool_destroyed(wl_resource* resource) {
    auto* pool = static_cast<shm_pool*>(wl_resource_get_user_data(resource));
    pool->object_alive = false;
    ++pool->shm.counters().pools_destroyed;
    release_pool_ref(pool);
}

// ---- wl_shm ----

void shm_create_pool(wl_client* client, wl_resource* resource, std::uint32_t id, std::int32_t raw_fd, std::int32_t size) {
    auto& shm = *static_cast<shm_global*>(wl_resource_get_user_data(resource));
    du::unique_fd fd{raw_fd};  // ours from here on, whatever happens
    if (size <= 0) return wl_resource_post_error(resource, WL_SHM_ERROR_INVALID_STRIDE, "invalid size (%d)", size);
    std::error_code ec;
    du::mapping view = du::mapping::map(fd.get(), static_cast<std::size_t>(size), PROT_READ, MAP_SHARED, ec);
    if (ec) return wl_resource_post_error(resource, WL_SHM_ERROR_INVALID_FD, "failed mmap fd %d: %s", fd.get(), ec.message().c_str());
    auto* pool = new (std::nothrow) shm_pool{shm, du::shm_region{std::move(fd), std::move(view)}, size};
    wl_resource* pool_resource = pool ? wl_resource_create(client, &wl_shm_pool_interface, 1, id) : nullptr;
    if (pool_resource == nullptr) {
        delete pool;  // unmaps, then closes
        return wl_client_post_no_memory(client);
    }
    wl_resource_set_implementation(pool_resource, &pool_impl, pool, pool_destroyed);
    ++shm.counters().pools_created;
}

// Value-initialised, then filled: libwayland 1.23 added `release` (wl_shm version 2), which a global
// created at version 1 never receives, and a designated list naming only create_pool does not build
// there under -Werror=missing-field-initializers.
const struct wl_shm_interface shm_impl = [] {
    struct wl_shm_interface impl{};
    impl.create_pool = shm_create_pool;
    return impl;
}();

void bind_shm(wl_client* client, void* data, std::uint32_t version, std::uint32_t id) {
    wl_resource* resource = wl_resource_create(client, &wl_shm_interface, static_cast<int>(version), id);
    if (resource == nullptr) return wl_client_post_no_memory(client);
    wl_resource_set_implementation(resource, &shm_impl, data, nullptr);
    wl_shm_send_format(resource, WL_SHM_FORMAT_ARGB8888);
    wl_shm_send_format(resource, WL_SHM_FORMAT_XRGB8888);
}

}  // namespace

shm_global::shm_global(wl_display* display, reclaimer& reclaim) : reclaim_(reclaim) {
    global_ = wl_global_create(display, &wl_shm_interface, 1, this, bind_shm);
    if (global_ == nullptr) throw std::runtime_error("wl_global_create(wl_shm) failed");
}

shm_global::~shm_global() { wl_global_destroy(global_); }

bool is_shm_buffer(wl_resource* buffer) noexcept {
    return wl_resource_instance_of(buffer, &wl_buffer_interface, &buffer_impl) != 0;
}

bool read_shm_buffer(wl_resource* resource, std::uint64_t& sum) noexcept {
    const auto* buffer = static_cast<shm_buffer*>(wl_resource_get_user_data(resource));
    shm_pool& pool = *buffer->pool;
    if (pool.unreadable) return false;
    const auto bytes = pool.region.bytes().subspan(static_cast<std::size_t>(buffer->offset),
                                                   static_cast<std::size_t>(buffer->stride) * static_cast<std::size_t>(buffer->height));
    if (guarded_page_checksum(bytes, sum)) return true;
    pool.unreadable = true;
    ++pool.shm.counters().truncated_reads;
    wl_resource_post_error(resource, WL_SHM_ERROR_INVALID_FD, "error accessing SHM buffer: the client truncated its pool");
    return false;
}

}  // namespace shm_compositor

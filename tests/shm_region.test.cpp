#include <doctest/doctest.h>

#include "test_support.hpp"

#include <type_traits>

using namespace du_test;

static_assert(!std::is_copy_constructible_v<du::shm_region> && !std::is_copy_assignable_v<du::shm_region>);
static_assert(std::is_nothrow_move_constructible_v<du::shm_region> && std::is_nothrow_move_assignable_v<du::shm_region>);
static_assert(std::is_nothrow_destructible_v<du::shm_region>);

namespace {

// True when the script saw the unmap of `addr` before the close of `fd`, and each exactly once.
bool unmapped_before_closed(const void* addr, int fd) {
    int unmap_at = -1;
    int close_at = -1;
    int unmaps = 0;
    int closes = 0;
    const auto calls = dt::script().calls();
    for (int i = 0; i < static_cast<int>(calls.size()); ++i) {
        const auto& c = calls[static_cast<std::size_t>(i)];
        if (c.op == call_kind::unmap && c.addr == addr) unmap_at = i, ++unmaps;
        if (c.op == call_kind::close && c.fd == fd) close_at = i, ++closes;
    }
    return unmaps == 1 && closes == 1 && unmap_at < close_at;
}

}  // namespace

TEST_CASE("shm_region: the destructor unmaps before it closes") {
    dt::reset();
    void* addr = nullptr;
    int fd = -1;
    {
        auto region = dt::make_region(8 * mib);
        addr = region.data();
        fd = region.fd();
        CHECK(region.size() == 8 * mib);
    }
    CHECK(unmapped_before_closed(addr, fd));
    CHECK(dt::script().open_fds() == 0);
    CHECK(dt::script().mapped_bytes() == 0);
}

TEST_CASE("shm_region: move assignment tears the old pool down in order") {
    dt::reset();
    auto first = dt::make_region(mib);
    void* old_addr = first.data();
    const int old_fd = first.fd();
    first = dt::make_region(2 * mib);
    CHECK(unmapped_before_closed(old_addr, old_fd));
    CHECK(first.size() == 2 * mib);
    auto& alias = first;
    first = std::move(alias);
    CHECK(first.size() == 2 * mib);
    CHECK(dt::script().open_fds() == 1);
}

TEST_CASE("shm_region: resize maps anew and hands back the old mapping, still mapped") {
    dt::reset();
    auto region = dt::make_region(mib);
    void* before = region.data();
    auto old = region.resize(4 * mib, PROT_READ, MAP_SHARED);
    CHECK(old.data() == before);
    CHECK(old.size() == mib);
    CHECK(region.size() == 4 * mib);
    CHECK(region.data() != before);
    CHECK(dt::script().count(call_kind::unmap) == 0);
    CHECK(dt::script().mapped_bytes() == 5 * mib);
}

TEST_CASE("shm_region: a failed resize leaves the region as it was") {
    dt::reset();
    auto region = dt::make_region(mib);
    void* before = region.data();
    dt::script().fail = [](const dt::os_call& c) { return c.op == call_kind::map ? ENOMEM : 0; };
    std::error_code ec;
    auto old = region.resize(4 * mib, PROT_READ, MAP_SHARED, ec);
    CHECK(ec == std::error_code(ENOMEM, std::system_category()));
    CHECK_FALSE(old);
    CHECK(region.data() == before);
    CHECK_THROWS_AS(static_cast<void>(region.resize(4 * mib, PROT_READ, MAP_SHARED)), std::system_error);
    CHECK(region.data() == before);
}

TEST_CASE("shm_region: release hands both parts back untouched") {
    dt::reset();
    auto region = dt::make_region(mib);
    const int fd = region.fd();
    auto [owned_fd, owned_map] = region.release();
    CHECK_FALSE(region);
    CHECK(owned_fd.get() == fd);
    CHECK(owned_map.size() == mib);
    CHECK(dt::script().calls().size() == 1);  // the map only
}

TEST_CASE("shm_region: released parts dropped together still unmap before they close") {
    dt::reset();
    auto region = dt::make_region(mib);
    const int fd = region.fd();
    const void* addr = region.data();
    { [[maybe_unused]] auto parts = region.release(); }
    CHECK(unmapped_before_closed(addr, fd));
}

TEST_CASE("shm_region: a real pool leaves no descriptor or mapping behind") {
    const auto fds = open_fds();
    const auto before = maps();
    { auto region = real_pool(4 * mib); }
    CHECK(open_fds() == fds);
    CHECK(maps() == before);
}

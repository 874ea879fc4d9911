#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cstdint>
#include <stdexcept>
#include <type_traits>

using namespace du_test;

static_assert(!std::is_copy_constructible_v<du::mapping> && !std::is_copy_assignable_v<du::mapping>);
static_assert(std::is_nothrow_move_constructible_v<du::mapping> && std::is_nothrow_move_assignable_v<du::mapping>);
static_assert(std::is_nothrow_destructible_v<du::mapping>);
static_assert(!std::is_convertible_v<du::mapping, bool>, "operator bool must be explicit");

namespace {

void* page_aligned_fake() { return dt::script().map_range(4 * mib); }

}  // namespace

TEST_CASE("mapping: adopt refuses null, MAP_FAILED, unaligned addresses, zero length and wrapping ranges") {
    dt::reset();
    void* good = page_aligned_fake();
    auto* unaligned = static_cast<char*>(good) + 1;
    const std::size_t too_long = SIZE_MAX - reinterpret_cast<std::uintptr_t>(good) + 2;  // one byte past the top
    for (auto [addr, length] : {std::pair<void*, std::size_t>{nullptr, 4096}, {MAP_FAILED, 4096}, {unaligned, 4096}, {good, 0},
                                {good, SIZE_MAX}, {good, too_long}}) {
        CHECK_THROWS_AS(static_cast<void>(dt::scripted_mapping::adopt(addr, length)), std::invalid_argument);
        std::error_code ec;
        auto m = dt::scripted_mapping::adopt(addr, length, ec);
        CHECK(ec == std::errc::invalid_argument);
        CHECK_FALSE(m);
    }
    CHECK(dt::script().count(call_kind::unmap) == 0);
}

TEST_CASE("mapping: adopt accepts a range that ends exactly at the top of the address space") {
    void* top_page = reinterpret_cast<void*>(UINTPTR_MAX - du::detail::page_size() + 1);
    std::error_code ec;
    auto m = dt::scripted_mapping::adopt(top_page, du::detail::page_size(), ec);
    CHECK_FALSE(ec);
    CHECK(m.size() == du::detail::page_size());
    static_cast<void>(m.release());  // never mapped: nothing to unmap
}

TEST_CASE("mapping: the exception says what was wrong") {
    try {
        static_cast<void>(du::mapping::adopt(nullptr, 4096));
        FAIL("adopt(nullptr) must throw");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("null") != std::string::npos);
    }
}

TEST_CASE("mapping: adopt clears a stale error code on success") {
    dt::reset();
    std::error_code ec = std::make_error_code(std::errc::io_error);
    auto m = dt::scripted_mapping::adopt(page_aligned_fake(), 4 * mib, ec);
    CHECK_FALSE(ec);
    CHECK(m.size() == 4 * mib);
}

TEST_CASE("mapping: a failing mmap reports its errno both ways") {
    dt::reset();
    dt::script().fail = [](const dt::os_call& c) { return c.op == call_kind::map ? ENOMEM : 0; };
    const int fd = dt::script().open_fd(mib);
    std::error_code ec;
    auto m = dt::scripted_mapping::map(fd, mib, PROT_READ, MAP_SHARED, 0, ec);
    CHECK(ec == std::error_code(ENOMEM, std::system_category()));
    CHECK_FALSE(m);
    try {
        static_cast<void>(dt::scripted_mapping::map(fd, mib, PROT_READ, MAP_SHARED));
        FAIL("map must throw");
    } catch (const std::system_error& e) {
        CHECK(e.code().value() == ENOMEM);
    }
}

TEST_CASE("mapping: map refuses a zero length without calling mmap") {
    dt::reset();
    const int fd = dt::script().open_fd(mib);
    std::error_code ec;
    CHECK_FALSE(dt::scripted_mapping::map(fd, 0, PROT_READ, MAP_SHARED, ec));
    CHECK(ec == std::errc::invalid_argument);
    CHECK_THROWS_AS(static_cast<void>(dt::scripted_mapping::map(fd, 0, PROT_READ, MAP_SHARED)), std::invalid_argument);
    CHECK(dt::script().count(call_kind::map) == 0);
}

TEST_CASE("mapping: a real mmap of a bad descriptor throws system_error with EBADF") {
    try {
        static_cast<void>(du::mapping::map(-1, 4096, PROT_READ, MAP_SHARED));
        FAIL("map(-1) must throw");
    } catch (const std::system_error& e) {
        CHECK(e.code() == std::error_code(EBADF, std::system_category()));
    }
}

TEST_CASE("mapping: the destructor and reset unmap once and keep errno") {
    dt::reset();
    void* addr = page_aligned_fake();
    {
        auto m = dt::scripted_mapping::adopt(addr, 4 * mib);
        errno = EAGAIN;
        m.reset();
        CHECK(errno == EAGAIN);
        CHECK_FALSE(m);
        m.reset();
    }
    CHECK(dt::script().count(call_kind::unmap) == 1);
    CHECK(dt::script().mapped_bytes() == 0);
    CHECK(dt::script().misuse() == 0);
}

TEST_CASE("mapping: release hands the range back without unmapping") {
    dt::reset();
    void* addr = page_aligned_fake();
    auto m = dt::scripted_mapping::adopt(addr, 4 * mib);
    const auto range = m.release();
    CHECK(range.data() == addr);
    CHECK(range.size() == 4 * mib);
    CHECK_FALSE(m);
    CHECK(dt::script().count(call_kind::unmap) == 0);
}

TEST_CASE("mapping: moves transfer the range and self-move keeps it") {
    dt::reset();
    void* a = page_aligned_fake();
    void* b = page_aligned_fake();
    auto first = dt::scripted_mapping::adopt(a, 4 * mib);
    auto second = std::move(first);
    CHECK_FALSE(first);  // NOLINT(bugprone-use-after-move)
    CHECK(second.data() == a);
    auto third = dt::scripted_mapping::adopt(b, 4 * mib);
    third = std::move(second);
    CHECK(third.data() == a);
    CHECK(dt::script().count(call_kind::unmap) == 1);  // b went when third took a
    auto& alias = third;
    third = std::move(alias);
    CHECK(third.data() == a);
    CHECK(dt::script().count(call_kind::unmap) == 1);
}

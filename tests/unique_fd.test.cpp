#include <doctest/doctest.h>

#include "test_support.hpp"

#include <fcntl.h>

#include <type_traits>

using namespace du_test;

static_assert(!std::is_copy_constructible_v<du::unique_fd> && !std::is_copy_assignable_v<du::unique_fd>);
static_assert(std::is_nothrow_move_constructible_v<du::unique_fd> && std::is_nothrow_move_assignable_v<du::unique_fd>);
static_assert(std::is_nothrow_destructible_v<du::unique_fd>);
static_assert(!std::is_convertible_v<int, du::unique_fd> && !std::is_convertible_v<du::unique_fd, int>);
static_assert(!std::is_convertible_v<du::unique_fd, bool>, "operator bool must be explicit");

TEST_CASE("unique_fd: the destructor closes exactly once") {
    dt::reset();
    const int fd = dt::script().open_fd();
    { dt::scripted_fd owner{fd}; CHECK(owner.get() == fd); }
    CHECK_FALSE(dt::script().is_open(fd));
    CHECK(dt::script().count(call_kind::close) == 1);
    CHECK(dt::script().misuse() == 0);
}

TEST_CASE("unique_fd: a negative descriptor is empty and closes nothing") {
    dt::reset();
    { dt::scripted_fd none{-7}; CHECK_FALSE(none); CHECK(none.get() == -1); }
    CHECK(dt::script().count(call_kind::close) == 0);
}

TEST_CASE("unique_fd: release gives up ownership without closing") {
    dt::reset();
    const int fd = dt::script().open_fd();
    {
        dt::scripted_fd owner{fd};
        CHECK(owner.release() == fd);
        CHECK_FALSE(owner);
    }
    CHECK(dt::script().is_open(fd));
}

TEST_CASE("unique_fd: reset closes the old descriptor and keeps errno") {
    dt::reset();
    const int a = dt::script().open_fd();
    const int b = dt::script().open_fd();
    dt::script().fail = [](const dt::os_call&) { return EIO; };
    dt::scripted_fd owner{a};
    errno = ENOENT;
    owner.reset(b);
    CHECK(errno == ENOENT);
    CHECK_FALSE(dt::script().is_open(a));
    CHECK(owner.get() == b);
    owner.reset();
    CHECK(errno == ENOENT);
    CHECK_FALSE(owner);
    CHECK(dt::script().count(call_kind::close) == 2);
}

TEST_CASE("unique_fd: close is never retried after EINTR") {
    dt::reset();
    dt::script().fail = [](const dt::os_call& c) { return c.op == call_kind::close ? EINTR : 0; };
    { dt::scripted_fd owner{dt::script().open_fd()}; }
    CHECK(dt::script().count(call_kind::close) == 1);
}

TEST_CASE("unique_fd: resetting to the descriptor already owned does not close it") {
    dt::reset();
    const int fd = dt::script().open_fd();
    dt::scripted_fd owner{fd};
    owner.reset(fd);
    CHECK(dt::script().is_open(fd));
    CHECK(owner.get() == fd);
}

TEST_CASE("unique_fd: moves transfer ownership and self-move keeps it") {
    dt::reset();
    const int a = dt::script().open_fd();
    const int b = dt::script().open_fd();
    dt::scripted_fd first{a};
    dt::scripted_fd second{std::move(first)};
    CHECK_FALSE(first);  // NOLINT(bugprone-use-after-move): moved-from state is specified
    CHECK(second.get() == a);
    dt::scripted_fd third{b};
    third = std::move(second);
    CHECK_FALSE(dt::script().is_open(b));
    CHECK(third.get() == a);
    auto& alias = third;
    third = std::move(alias);
    CHECK(third.get() == a);
    CHECK(dt::script().is_open(a));
    swap(first, third);
    CHECK(first.get() == a);
    CHECK_FALSE(third);
}

TEST_CASE("unique_fd: a real descriptor is closed by the destructor") {
    int raw = -1;
    {
        du::unique_fd fd{::memfd_create("du-test", MFD_CLOEXEC)};
        REQUIRE(fd);
        raw = fd.get();
        CHECK(::fcntl(raw, F_GETFD) != -1);
    }
    CHECK(::fcntl(raw, F_GETFD) == -1);
    CHECK(errno == EBADF);
}

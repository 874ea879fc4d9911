// Fault injection: every error munmap(2) and close(2) can return, at every call position, during
// drain, flush, the destructor, a push forced over max_pending_bytes, and with the worker closing or
// unmapping; plus allocation failures when the queue's rings must grow. Each run checks that nothing
// escapes, every item is accounted for exactly once, no descriptor is closed twice, every mapping is
// unmapped before its descriptor is closed, and the queue still works afterwards.
#include <doctest/doctest.h>

#include "fuzz/queue_harness.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <vector>

using namespace du_reliability;
using namespace std::chrono_literals;

namespace {

bool fail_array_new = false;
std::map<std::string, std::uint64_t> faults_injected;  // by errno name, for the README's figures

const char* errno_name(int e) {
    switch (e) {
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case EPERM: return "EPERM";
    case EBADF: return "EBADF";
    case EINTR: return "EINTR";
    case EIO: return "EIO";
    case ENOSPC: return "ENOSPC";
    case EDQUOT: return "EDQUOT";
    default: return "other";
    }
}

enum class site { drain, flush, destructor, cap, close_on_worker, close_on_worker_cap, unmap_on_worker };
constexpr std::array all_sites{site::drain, site::flush, site::destructor, site::cap, site::close_on_worker,
                               site::close_on_worker_cap, site::unmap_on_worker};

const char* site_name(site s) {
    switch (s) {
    case site::drain: return "drain";
    case site::flush: return "flush";
    case site::destructor: return "destructor";
    case site::cap: return "max_pending_bytes";
    case site::close_on_worker: return "close_on_worker";
    case site::close_on_worker_cap: return "close_on_worker+max_pending_bytes";
    case site::unmap_on_worker: return "unmap_on_worker";
    }
    return "?";
}

// The fault: the `position`-th call of `op` fails with `error`; `sticky` makes every later munmap at
// the same address fail too, so the fallback fails and the bytes are reported leaked.
struct fault {
    call_kind op = call_kind::unmap;
    std::size_t position = 0;
    int error = 0;
    bool sticky = false;
};

struct workload {
    std::vector<int> fds;                                   // every descriptor pushed
    std::vector<std::pair<std::byte*, std::size_t>> ranges;  // every range pushed, page-rounded
    std::vector<std::pair<std::size_t, int>> region_pairs;   // range index -> its descriptor
};

struct run_result {
    std::vector<dt::os_call> calls;
    workload pushed;
    du::reclaim_stats stats;
    std::size_t errors_reported = 0;
    std::size_t injected = 0;
};

constexpr std::size_t mib = std::size_t{1} << 20U;

// Five items: regions of 5 MiB (three 2 MiB chunks) and of one page, a bare 3 MiB mapping (two
// chunks), a bare descriptor and a region holding only its descriptor: 6 munmaps and 4 closes.
// Every handle is made before the first push: a push over the cap (or the worker) may close a
// descriptor at once, and a number reused inside the workload would make the order check below blame
// one pool for another's close.
template <class Queue>
workload push_items(Queue& q) {
    workload w;
    auto region = [&](std::size_t bytes) {
        auto r = dt::make_region(bytes);
        w.region_pairs.emplace_back(w.ranges.size(), r.fd());
        w.fds.push_back(r.fd());
        w.ranges.emplace_back(static_cast<std::byte*>(r.data()), du::detail::round_up_to_page(bytes));
        return r;
    };
    auto big = region(5 * mib);
    auto map = dt::scripted_mapping::adopt(dt::script().map_range(3 * mib + 100), 3 * mib + 100);
    w.ranges.emplace_back(static_cast<std::byte*>(map.data()), du::detail::round_up_to_page(3 * mib + 100));
    dt::scripted_fd fd{dt::script().open_fd(mib)};
    w.fds.push_back(fd.get());
    auto small = region(100);
    dt::scripted_region fd_only{dt::scripted_fd{dt::script().open_fd(4096)}, dt::scripted_mapping{}};
    w.fds.push_back(fd_only.fd());
    q.push(std::move(big));
    q.push(std::move(map));
    q.push(std::move(fd), mib);
    q.push(std::move(small));
    q.push(std::move(fd_only));
    return w;
}

bool wait_until_empty(const scripted_queue& q) {
    // Not a timing assertion: the worker gets as long as it needs, the test only refuses to hang.
    for (int i = 0; i < 100'000 && !q.empty(); ++i) std::this_thread::sleep_for(100us);
    return q.empty();
}

run_result run(site where, const fault& f, bool throwing_on_error) {
    auto& os = dt::reset();
    os.unmap_ns_per_byte = 0.2;  // a 2 MiB chunk costs ~0.4 ms, a 1 ms drain runs two or three steps
    os.close_ns_per_byte = 0.1;
    std::size_t seen_of_kind = 0;
    void* sticky_addr = nullptr;
    run_result result;
    os.fail = [&](const dt::os_call& c) {
        if (c.op == call_kind::map) return 0;
        if (f.sticky && c.op == call_kind::unmap && c.addr == sticky_addr) {
            ++result.injected;
            return f.error;
        }
        if (c.op != f.op || seen_of_kind++ != f.position) return 0;
        sticky_addr = c.addr;
        ++result.injected;
        return f.error;
    };
    std::size_t errors_reported = 0;
    du::reclaim_options o = two_mib_steps();  // the workload's call counts are in 2 MiB steps
    o.on_error = [&](const du::reclaim_error&) {
        ++errors_reported;  // the worker and the drain thread never report at once: one failing call each
#if DEFERRED_UNMAP_HAS_EXCEPTIONS
        if (throwing_on_error) throw std::runtime_error("on_error throws; the queue must swallow it");
#else
        static_cast<void>(throwing_on_error);
#endif
    };
    o.close_on_worker = where == site::close_on_worker || where == site::close_on_worker_cap;
    o.unmap_on_worker = where == site::unmap_on_worker;
    o.worker_pause = 0ns;
    if (where == site::cap || where == site::close_on_worker_cap) o.max_pending_bytes = 0;
    {
        scripted_queue q{std::move(o)};
        result.pushed = push_items(q);
        switch (where) {
        case site::drain:
        case site::close_on_worker:
        case site::close_on_worker_cap:
            for (int i = 0; i < 100 && q.pending_bytes() > 0; ++i) q.drain(1ms);
            CHECK(q.pending_bytes() == 0);
            q.flush();
            break;
        case site::flush: q.flush(); break;
        case site::destructor: break;
        case site::cap: q.flush(); break;
        case site::unmap_on_worker:
            q.drain(1ms);
            CHECK(wait_until_empty(q));
            q.flush();
            break;
        }
        if (where != site::destructor) {
            CHECK(q.empty());
            result.stats = q.stats();
            // Still usable: a new pool (its descriptor likely reusing a number closed above) comes back.
            auto again = dt::make_region(3 * mib);
            const int fd = again.fd();
            q.push(std::move(again));
            q.flush();
            CHECK_FALSE(os.is_open(fd));
            CHECK(q.stats().items_reclaimed == result.stats.items_reclaimed + 1);
        }
        result.calls = os.calls();
    }
    if (where == site::destructor) result.calls = os.calls();
    result.errors_reported = errors_reported;
    return result;
}

// Each pushed descriptor closed (once: a second close would show in misuse()), and no munmap of its
// region's range after that close.
void check_order(const run_result& r) {
    const workload& w = r.pushed;
    for (const int fd : w.fds) {
        const auto closes = std::count_if(r.calls.begin(), r.calls.end(),
                                          [fd](const dt::os_call& c) { return c.op == call_kind::close && c.fd == fd; });
        CHECK(closes >= 1);  // the reuse check may close the same number again, for the new pool
    }
    for (const auto& [range, fd] : w.region_pairs) {
        const auto [addr, length] = w.ranges[range];
        const auto close_at = std::find_if(r.calls.begin(), r.calls.end(),
                                           [fd = fd](const dt::os_call& c) { return c.op == call_kind::close && c.fd == fd; });
        const bool unmap_after = std::any_of(close_at, r.calls.end(), [addr = addr, length = length](const dt::os_call& c) {
            auto* p = static_cast<std::byte*>(c.addr);
            return c.op == call_kind::unmap && p >= addr && p < addr + length;
        });
        CHECK_FALSE(unmap_after);
    }
}

// What every run must show, whatever failed.
void check_accounting(const run_result& r, site where) {
    const auto& os = dt::script();
    CHECK(os.misuse() == 0);   // no double close, no double unmap
    CHECK(os.open_fds() == 0);  // a failed close still releases the descriptor
    std::size_t failed_unmaps = 0, failed_closes = 0;
    for (const auto& c : r.calls) {
        if (c.result == 0) continue;
        if (c.op == call_kind::unmap) ++failed_unmaps;
        if (c.op == call_kind::close) ++failed_closes;
    }
    CHECK(r.errors_reported == failed_unmaps + failed_closes);
    CHECK(r.injected == failed_unmaps + failed_closes);
    check_order(r);
    if (where != site::destructor) {
        const auto& s = r.stats;
        CHECK(s.items_pushed == 5);
        CHECK(s.items_reclaimed == 5);
        CHECK(s.unmap_errors == failed_unmaps);
        CHECK(s.close_errors == failed_closes);
        CHECK(s.bytes_unmapped + s.bytes_leaked == s.bytes_pushed);
        CHECK(os.mapped_bytes() == s.bytes_leaked);
    }
}

}  // namespace

// The queue's rings grow with new[](nothrow); this lets a test make that growth fail.
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
    if (fail_array_new) return nullptr;
    try {
        return ::operator new[](size);
    } catch (...) {
        return nullptr;
    }
}

TEST_CASE("faults: every munmap and close error at every position and site is accounted for exactly once") {
    constexpr std::size_t unmap_calls = 6;
    constexpr std::size_t close_calls = 4;
    std::size_t runs = 0;
    for (const site where : all_sites) {
        for (const bool sticky : {false, true}) {
            for (std::size_t position = 0; position < unmap_calls; ++position) {
                for (const int error : unmap_errnos) {
                    CAPTURE(site_name(where));
                    CAPTURE(position);
                    CAPTURE(errno_name(error));
                    CAPTURE(sticky);
                    const run_result r = run(where, {call_kind::unmap, position, error, sticky}, runs % 2 == 1);
                    check_accounting(r, where);
                    CHECK(r.injected >= 1);
                    faults_injected[errno_name(error)] += r.injected;
                    ++runs;
                }
            }
        }
        for (std::size_t position = 0; position < close_calls; ++position) {
            for (const int error : close_errnos) {
                CAPTURE(site_name(where));
                CAPTURE(position);
                CAPTURE(errno_name(error));
                const run_result r = run(where, {call_kind::close, position, error, false}, runs % 2 == 1);
                check_accounting(r, where);
                CHECK(r.injected == 1);
                faults_injected[errno_name(error)] += r.injected;
                ++runs;
            }
        }
    }
    std::printf("fault injection: %zu runs\n", runs);
}

TEST_CASE("faults: a failed chunk is retried once as the whole rest, and a failed fallback leaks nothing silently") {
    auto& os = dt::reset();
    void* first = nullptr;
    os.fail = [&](const dt::os_call& c) {
        if (c.op != call_kind::unmap) return 0;
        if (first == nullptr) first = c.addr;
        return c.addr == first ? ENOMEM : 0;  // the chunk and its fallback both fail
    };
    std::vector<du::reclaim_error> errors;
    scripted_queue q{inline_mode(two_mib_steps({.on_error = [&](const du::reclaim_error& e) { errors.push_back(e); }}))};
    workload w = push_items(q);
    q.flush();
    REQUIRE(errors.size() == 2);
    CHECK(errors[0].length == 2 * mib);
    CHECK_FALSE(errors[0].recovered);
    CHECK(errors[1].length == 5 * mib);
    const auto s = q.stats();
    CHECK(s.bytes_leaked == 5 * mib);
    CHECK(s.fallback_unmaps == 1);
    CHECK(os.mapped_bytes() == 5 * mib);  // exactly what stats call leaked, still mapped
    CHECK_FALSE(os.is_open(w.fds[0]));     // the pool's descriptor is closed anyway, once
    CHECK(os.misuse() == 0);
}

TEST_CASE("faults: every fd is closed once and after its mapping whatever fails") {
    for (const site where : all_sites) {
        for (std::size_t position = 0; position < 6; ++position) {
            CAPTURE(site_name(where));
            CAPTURE(position);
            auto& os = dt::reset();
            std::size_t seen = 0;
            os.fail = [&](const dt::os_call& c) { return c.op == call_kind::unmap && seen++ == position ? EINVAL : 0; };
            run_result r;
            workload w;
            {
                scripted_queue q{{.close_on_worker = where == site::close_on_worker, .unmap_on_worker = where == site::unmap_on_worker,
                                  .worker_pause = 0ns}};
                w = push_items(q);
                if (where == site::unmap_on_worker) {
                    q.drain(1ms);
                    CHECK(wait_until_empty(q));
                }
                if (where != site::destructor) q.flush();
            }
            r.calls = os.calls();
            r.pushed = w;
            for (const int fd : w.fds)
                CHECK(std::count_if(r.calls.begin(), r.calls.end(), [fd](const dt::os_call& c) { return c.op == call_kind::close && c.fd == fd; }) == 1);
            check_order(r);
            CHECK(os.misuse() == 0);
        }
    }
}

TEST_CASE("faults: when the queue cannot grow, a push tears down everything older, then its item") {
    for (const bool on_worker : {false, true}) {
        CAPTURE(on_worker);
        auto& os = dt::reset();
        {
            scripted_queue q{{.close_on_worker = on_worker, .initial_capacity = 1}};
            std::vector<int> fds;
            fail_array_new = true;  // the ring holds 16: pushes 17 and 34 find no room and empty it
            for (int i = 0; i < 40; ++i) {
                auto region = dt::make_region(64 * 1024);
                fds.push_back(region.fd());
                q.push(std::move(region));
            }
            fail_array_new = false;
            CHECK(q.pending_items() == 6);
            q.flush();
            const auto s = q.stats();
            CHECK(s.synchronous_pushes == 2);
            CHECK(s.items_pushed == 40);
            CHECK(s.items_reclaimed == 40);
            for (const int fd : fds) CHECK_FALSE(os.is_open(fd));
            faults_injected["allocation"] += s.synchronous_pushes;
        }
        CHECK(os.mapped_bytes() == 0);
        CHECK(os.open_fds() == 0);
        CHECK(os.misuse() == 0);
    }
}

TEST_CASE("faults: when the worker's ring cannot grow, drain closes on its own thread") {
    auto& os = dt::reset();
    std::atomic<bool> worker_blocked{false}, release{false};
    const auto drain_thread = std::this_thread::get_id();
    os.fail = [&](const dt::os_call& c) { return c.op == call_kind::close && c.thread != drain_thread && !worker_blocked ? EIO : 0; };
    du::reclaim_options o;
    o.close_on_worker = true;
    o.initial_capacity = 1;
    // The worker's first close fails; it waits in on_error, outside every lock, until drain is done.
    o.on_error = [&](const du::reclaim_error&) {
        worker_blocked = true;
        while (!release) std::this_thread::yield();
    };
    std::vector<int> fds;
    {
        scripted_queue q{std::move(o)};
        for (int i = 0; i < 40; ++i) {
            dt::scripted_fd fd{os.open_fd(4096)};
            fds.push_back(fd.get());
            q.push(std::move(fd));
        }
        fail_array_new = true;
        const du::drain_report report = q.drain(1ms);
        fail_array_new = false;
        release = true;
        CHECK(report.fds_handed_off + report.fds_closed == 40);
        CHECK(report.fds_handed_off >= 16);
        CHECK(report.fds_closed >= 23);
        faults_injected["allocation"] += report.fds_closed;
        q.flush();
        CHECK(q.stats().items_reclaimed == 40);
    }
    for (const int fd : fds) CHECK_FALSE(os.is_open(fd));
    CHECK(os.misuse() == 0);
}

TEST_CASE("faults: a queue asked to reserve more items than can exist throws bad_alloc instead of hanging") {
    dt::reset();
    const auto make = [] { scripted_queue q{{.initial_capacity = std::numeric_limits<std::size_t>::max()}}; };
    CHECK_THROWS_AS(make(), std::bad_alloc);
}

TEST_CASE("faults: summary") {
    std::printf("faults injected by kind:");
    for (const auto& [name, n] : faults_injected) std::printf(" %s %llu", name.c_str(), static_cast<unsigned long long>(n));
    std::printf("\n");
}

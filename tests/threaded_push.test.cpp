// Threads: pushes from four threads while one thread drains, in every worker mode and with
// max_pending_bytes forcing reclaims on the pushing threads, while a fifth thread reads the queue's
// state. Run under ThreadSanitizer in CI (.ci/stages/30-tsan.sh). Scripted OS: the interleavings are
// real, the system calls are not, so every item can be accounted for.
#include <doctest/doctest.h>

#include "fuzz/queue_harness.hpp"

#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <thread>
#include <vector>

using namespace du_reliability;
using namespace std::chrono_literals;

namespace {

struct threaded_mode {
    const char* name;
    du::reclaim_options options;
};

}  // namespace

TEST_CASE("threads: pushes from many threads while drain runs lose nothing and close nothing twice") {
    constexpr int producers = 4;
    constexpr int per_producer = 5000;
    const std::size_t page = du::detail::page_size();
    const threaded_mode modes[] = {
        {"synchronous", {}},
        {"close_on_worker", {.close_on_worker = true}},
        {"unmap_on_worker", {.unmap_on_worker = true, .worker_pause = 0ns}},
        {"both workers", {.close_on_worker = true, .unmap_on_worker = true, .worker_pause = 0ns}},
        {"max_pending_bytes", {.max_pending_bytes = 64 * page}},
        {"max_pending_bytes, close_on_worker", {.max_pending_bytes = 64 * page, .close_on_worker = true}},
    };
    for (const auto& mode : modes) {
        CAPTURE(mode.name);
        auto& os = dt::reset();
        os.call_overhead = 2us;
        os.unmap_ns_per_byte = 0.01;
        std::atomic<int> failing{0};
        os.fail = [&](const dt::os_call& c) { return c.op != call_kind::map && ++failing % 97 == 0 ? (c.op == call_kind::unmap ? ENOMEM : EINTR) : 0; };
        std::atomic<std::size_t> reported{0};
        du::reclaim_options options = mode.options;
        options.on_error = [&](const du::reclaim_error&) { ++reported; };
        std::atomic<int> running{producers};
        std::atomic<bool> reader_done{false};
        du::reclaim_stats s;
        {
            scripted_queue q{std::move(options)};
            std::vector<std::thread> threads;
            for (int t = 0; t < producers; ++t) {
                threads.emplace_back([&, t] {
                    std::mt19937 rng{static_cast<unsigned>(t)};
                    for (int i = 0; i < per_producer; ++i) {
                        const std::size_t bytes = (1 + rng() % 8) * page;
                        switch (rng() % 3) {
                        case 0: q.push(dt::make_region(bytes)); break;
                        case 1: q.push(dt::scripted_mapping::adopt(dt::script().map_range(bytes), bytes)); break;
                        default: q.push(dt::scripted_fd{dt::script().open_fd(bytes)}, bytes); break;
                        }
                    }
                    --running;
                });
            }
            // Readers may ask from any thread while everything else runs.
            threads.emplace_back([&] {
                std::uint64_t last_pushed = 0, inconsistent = 0, reads_while_pushing = 0;
                while (!reader_done) {
                    const bool pushing = running > 0;
                    static_cast<void>(q.next_deadline());
                    static_cast<void>(q.model());
                    static_cast<void>(q.pending_bytes());
                    const auto snapshot = q.stats();
                    // A snapshot is consistent and totals never go back.
                    if (snapshot.items_reclaimed > snapshot.items_pushed || snapshot.items_pushed < last_pushed) ++inconsistent;
                    last_pushed = snapshot.items_pushed;
                    if (pushing && snapshot.items_pushed > 0) ++reads_while_pushing;
                }
                CHECK(inconsistent == 0);
                CHECK(reads_while_pushing > 0);  // the reads really overlapped the pushes
            });
            while (running > 0) q.drain(20us);
            reader_done = true;
            for (auto& t : threads) t.join();
            q.flush();
            CHECK(q.empty());
            s = q.stats();
        }
        const std::uint64_t total = producers * per_producer;
        CHECK(s.items_pushed == total);
        CHECK(s.items_reclaimed == total);
        CHECK(s.unmap_errors + s.close_errors == reported);
        CHECK(s.bytes_unmapped + s.bytes_leaked == s.bytes_pushed);
        CHECK(os.open_fds() == 0);
        CHECK(os.mapped_bytes() == s.bytes_leaked);
        CHECK(os.misuse() == 0);
        // Unmap before close, per region: once a descriptor is closed, no munmap touches a range that
        // was mapped from it (fake ranges are never reused, so the check is exact).
        std::map<int, std::vector<std::pair<std::uintptr_t, std::uintptr_t>>> mapped_from;
        std::map<std::uintptr_t, std::uintptr_t> closed_ranges;
        std::size_t unmaps_after_close = 0, closes = 0;
        for (const auto& c : os.calls()) {
            const auto addr = reinterpret_cast<std::uintptr_t>(c.addr);
            if (c.op == call_kind::map && c.result == 0) mapped_from[c.fd].emplace_back(addr, addr + c.length);
            if (c.op == call_kind::close) {
                ++closes;
                for (const auto& r : mapped_from[c.fd]) closed_ranges.emplace(r);
                mapped_from.erase(c.fd);
            }
            if (c.op == call_kind::unmap) {
                auto it = closed_ranges.upper_bound(addr);
                if (it != closed_ranges.begin() && std::prev(it)->second > addr) ++unmaps_after_close;
            }
        }
        CHECK(unmaps_after_close == 0);
        CHECK(closes == s.fds_closed);
    }
}

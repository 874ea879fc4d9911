// reclaimer.cpp - the five teardown modes behind one interface.
#include "reclaimer.hpp"

#include <array>
#include <utility>

#include <unistd.h>

namespace shm_compositor {

namespace du = deferred_unmap;
using std::chrono::nanoseconds;

namespace {

constexpr std::array<std::pair<std::string_view, reclaim_mode>, 5> mode_names{{
    {"close-first", reclaim_mode::close_first},
    {"unmap-first", reclaim_mode::unmap_first},
    {"queue", reclaim_mode::queue},
    {"queue+worker", reclaim_mode::queue_worker},
    {"queue+worker-unmap", reclaim_mode::queue_worker_unmap},
}};

bool immediate(reclaim_mode mode) noexcept {
    return mode == reclaim_mode::close_first || mode == reclaim_mode::unmap_first;
}

std::optional<du::reclaim_queue> make_queue(reclaim_mode mode, nanoseconds max_delay) {
    if (immediate(mode)) return std::nullopt;
    du::reclaim_options options;
    options.max_delay = max_delay;
    options.close_on_worker = mode == reclaim_mode::queue_worker;
    options.unmap_on_worker = mode == reclaim_mode::queue_worker_unmap;
    return std::optional<du::reclaim_queue>{std::in_place, std::move(options)};
}

// What munmap frees for a mapping of `bytes` (the queue counts the same way).
std::uint64_t page_rounded(std::size_t bytes) noexcept {
    static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
}

nanoseconds since(reclaimer::clock::time_point start) noexcept {
    return std::chrono::duration_cast<nanoseconds>(reclaimer::clock::now() - start);
}

}  // namespace

std::optional<reclaim_mode> parse_mode(std::string_view name) {
    for (const auto& [text, mode] : mode_names)
        if (text == name) return mode;
    return std::nullopt;
}

std::string_view mode_name(reclaim_mode mode) {
    for (const auto& [text, value] : mode_names)
        if (value == mode) return text;
    return "?";
}

reclaimer::reclaimer(reclaim_mode mode, nanoseconds max_delay) : mode_(mode), queue_(make_queue(mode, max_delay)) {}

void reclaimer::retire(du::shm_region&& pool) noexcept {
    ++immediate_.pools_retired;
    if (queue_) queue_->push(std::move(pool));
    else tear_down_now(std::move(pool));
    retired();
}

void reclaimer::retire(du::mapping&& old_view) noexcept {
    ++immediate_.views_retired;
    if (queue_) {
        queue_->push(std::move(old_view));
    } else {
        const auto start = clock::now();
        immediate_.bytes_reclaimed += page_rounded(old_view.size());
        old_view.reset();
        ++immediate_.items_reclaimed;
        inline_since_frame_ += since(start);
    }
    retired();
}

// What a compositor without the library does, in either order; timed, since it runs inside a request
// handler and delays everything behind it.
void reclaimer::tear_down_now(du::shm_region&& pool) noexcept {
    const auto start = clock::now();
    immediate_.bytes_reclaimed += page_rounded(pool.size());
    auto [fd, view] = pool.release();
    if (mode_ == reclaim_mode::close_first) {
        fd.reset();    // the mapping still pins the inode ...
        view.reset();  // ... so this munmap frees every page as it returns, after releasing mmap_lock
    } else {
        view.reset();
        fd.reset();
    }
    ++immediate_.items_reclaimed;
    inline_since_frame_ += since(start);
}

void reclaimer::retired() noexcept {
    if (on_retire_) on_retire_();
}

void reclaimer::on_frame(nanoseconds budget) noexcept {
    if (!queue_) {
        if (inline_since_frame_ > nanoseconds::zero()) immediate_.drains.record(inline_since_frame_);
        inline_since_frame_ = nanoseconds::zero();
        return;
    }
    drain_and_record(budget);
}

void reclaimer::on_idle(nanoseconds budget) noexcept {
    if (queue_) drain_and_record(budget);
}

// Times the whole drain call, not only its steps: in queue+worker-unmap mode it only wakes the
// worker, and that is what the compositor thread pays.
void reclaimer::drain_and_record(nanoseconds budget) noexcept {
    if (queue_->empty()) return;
    const auto start = clock::now();
    queue_->drain(budget);
    immediate_.drains.record(since(start));
}

reclaimer::clock::time_point reclaimer::next_deadline() const noexcept {
    return queue_ ? queue_->next_deadline() : clock::time_point::max();
}

std::size_t reclaimer::pending_items() const noexcept { return queue_ ? queue_->pending_items() : 0; }

void reclaimer::flush() noexcept {
    if (queue_) queue_->flush();
}

reclaim_summary reclaimer::summary() const noexcept {
    reclaim_summary result = immediate_;
    if (!queue_) return result;
    const du::reclaim_stats stats = queue_->stats();
    result.items_reclaimed = stats.items_reclaimed;
    result.bytes_reclaimed = stats.bytes_unmapped;
    result.teardown_errors = stats.unmap_errors + stats.close_errors;
    result.max_pending_bytes = stats.peak_pending_bytes;
    result.steps = stats.step_durations;
    result.worker_step_max = stats.worker_step_durations.max();
    result.model = queue_->model();
    return result;
}

}  // namespace shm_compositor

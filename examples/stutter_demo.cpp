// stutter_demo: a compositor frame loop hit by a burst of dead pools, once per teardown strategy.
//
// Each frame does a little fixed work (--work-us), then the frame-commit hook. At --burst-frame a
// client drops --pools pools of --pool-bytes (default 52 x 2880x1800x4, about 1 GB), all real memfds
// written by a client mapping and read by the compositor's. Per strategy it prints the worst
// frame-thread stall, the p99 frame time, the frames over the interval and the vblanks missed, and how
// many frames passed until every byte was returned. --svg FILE draws each strategy's frame times.
//
// Frames in which the frame thread was preempted (the machine had other work) are counted, and the
// "calm" figures leave them out; for the calm worst frame it prints the munmap and close calls the
// frame thread made in it and the longest of them, wall and CPU time, which tells a slow call from
// many calls and a call that cost that much from one whose thread was off the CPU.
//
// --strategies runs only the named ones (the README's picture sets close-first beside the queued modes).
//
// Usage: stutter_demo [--hz N] [--pools N] [--pool-bytes B] [--budget-us N] [--drain-pause-us N]
//                     [--max-step-deviations X] [--work-us N] [--burst-frame N] [--tail-frames N]
//                     [--strategies A,B,..] [--svg FILE] [--csv FILE] [--json FILE]
#include "bench_common.hpp"

#include <sstream>

namespace {

using namespace bench;
using std::chrono::microseconds;

/// Every strategy but the controls: no target here is a ratio whose noise they would show.
std::vector<strategy> default_strategies() {
    std::vector<strategy> out;
    std::copy_if(std::begin(all_strategies), std::end(all_strategies), std::back_inserter(out), [](strategy s) { return !is_control(s); });
    return out;
}

struct settings {
    unsigned hz = 60;
    std::size_t pools = 52;
    std::size_t pool_bytes = default_pool_bytes;
    unsigned budget_us = 1000;
    unsigned drain_pause_us = static_cast<unsigned>(std::chrono::duration_cast<std::chrono::microseconds>(queue_settings{}.drain_pause).count());
    double max_step_deviations = queue_settings{}.max_step_deviations;
    unsigned work_us = 2000;
    std::size_t burst_frame = 20;
    std::size_t tail_frames = 20;
    std::string svg, csv, json;
    std::vector<strategy> strategies = default_strategies();

    [[nodiscard]] nanoseconds interval() const { return nanoseconds{1'000'000'000 / hz}; }
};

settings parse(int argc, char** argv) {
    settings s;
    arg_parser args{"stutter_demo", "A 60 Hz frame loop hit by a ~1 GB burst of dead wl_shm pools, once per "
                                    "teardown strategy."};
    args.number("--hz", s.hz, "frame rate (default 60)");
    args.number("--pools", s.pools, "pools in the burst (default 52)");
    args.bytes("--pool-bytes", s.pool_bytes, "bytes per pool (default 2880*1800*4)");
    args.number("--budget-us", s.budget_us, "drain budget per frame (default 1000)");
    args.number("--drain-pause-us", s.drain_pause_us, "queue+worker/pause: sleep between two munmap steps (default 50)");
    args.number("--max-step-deviations", s.max_step_deviations, "max_step_deviations of the queued strategies but "
                                                                "the 2MiB ones: 0 sizes steps by the mean rate (default 2)");
    args.number("--work-us", s.work_us, "the compositor's own work per frame (default 2000)");
    args.number("--burst-frame", s.burst_frame, "frame at which the pools die (default 20)");
    args.number("--tail-frames", s.tail_frames, "frames drawn after all memory is back (default 20)");
    std::string only;
    args.text("--strategies", only, "comma-separated strategies to run (default: all but the /again controls)", "A,B,..");
    args.text("--svg", s.svg, "write a frame-time timeline per strategy");
    args.text("--csv", s.csv, "write the per-strategy figures as CSV");
    args.text("--json", s.json, "write them as JSON");
    args.parse(argc, argv);
    if (!only.empty()) {
        s.strategies.clear();
        std::istringstream list(only);
        for (std::string item; std::getline(list, item, ',');) {
            const auto* known = std::find_if(std::begin(all_strategies), std::end(all_strategies),
                                             [&](strategy k) { return item == name(k); });
            if (known == std::end(all_strategies)) {
                std::fprintf(stderr, "stutter_demo: unknown strategy '%s'; known:", item.c_str());
                for (strategy k : all_strategies) std::fprintf(stderr, " %s", name(k));
                std::fprintf(stderr, "\n");
                std::exit(2);
            }
            s.strategies.push_back(*known);
        }
    }
    if (s.hz == 0 || s.budget_us == 0 || s.pools == 0 || s.pool_bytes == 0) {
        std::fprintf(stderr, "stutter_demo: --hz, --budget-us, --pools and --pool-bytes must be positive\n");
        std::exit(2);
    }
    check_step_deviations("stutter_demo", s.max_step_deviations);
    return s;
}

struct outcome {
    strategy which;
    frame_run run;
    call_times calls;
    nanoseconds setup{0};  ///< making the pools: writing and reading every page
    nanoseconds loop{0};   ///< the frame loop
};

outcome run_strategy(strategy s, const settings& cfg) {
    progress("%s: making %zu pools", name(s), cfg.pools);
    const auto start = steady::now();
    std::vector<std::vector<pool>> dead;
    dead.push_back(make_pools(cfg.pools, cfg.pool_bytes));
    const auto ranges = ranges_of(dead);
    auto engine = make_engine(s, {.budget = microseconds{cfg.budget_us},
                                    .max_step_deviations = cfg.max_step_deviations,
                                    .drain_pause = microseconds{cfg.drain_pause_us},
                                    .prior = {}});
    call_log::reset(cfg.pools * (cfg.pool_bytes / (std::size_t{2} << 20) + 3) + 64);
    progress("%s: running frames", name(s));
    const auto setup_done = steady::now();
    const frame_config frames{.interval = cfg.interval(),
                              .work = microseconds{cfg.work_us},
                              .first_release = cfg.burst_frame,
                              .tail_frames = cfg.tail_frames};
    outcome out{s, run_frames(*engine, dead, frames), {}, setup_done - start, {}};
    out.loop = steady::now() - setup_done;
    out.calls = collect_calls(ranges);
    return out;
}

row figures(const outcome& o, const settings& cfg) {
    const double interval_ms = to_ms(cfg.interval());
    std::vector<double> totals, stalls, calm_stalls;
    double frames_over = 0, vblanks_missed = 0, preempted = 0;
    const frame_record* calm_worst = nullptr;  // what made the worst frame not preempted long
    for (std::size_t f = 0; f < o.run.frames.size(); ++f) {
        const double total = to_ms(o.run.frames[f].total);
        frames_over += total > interval_ms ? 1 : 0;
        vblanks_missed += std::floor(total / interval_ms);
        const bool affected = f >= cfg.burst_frame && f < cfg.burst_frame + std::max<std::size_t>(o.run.frames_to_return, 1);
        if (!affected) continue;
        totals.push_back(total);
        stalls.push_back(to_ms(o.run.frames[f].teardown));
        if (!o.run.frames[f].preempted) {
            calm_stalls.push_back(stalls.back());
            if (calm_worst == nullptr || o.run.frames[f].teardown > calm_worst->teardown) calm_worst = &o.run.frames[f];
        }
        preempted += o.run.frames[f].preempted ? 1 : 0;
    }
    const summary frame = summarize(totals), stall = summarize(stalls), calm = summarize(calm_stalls);
    const double budget_ms = cfg.budget_us / 1e3;
    return {{"strategy", std::string(name(o.which))},
            {"pools", static_cast<double>(cfg.pools), 0},
            {"pool_bytes", static_cast<double>(cfg.pool_bytes), 0},
            {"worst_stall_ms", stall.max, 2},
            {"p99_stall_ms", stall.p99, 2},
            {"calm_worst_stall_ms", calm.max, 2},
            {"calm_p99_stall_ms", calm.p99, 2},
            {"calm_worst_calls", calm_worst ? static_cast<double>(calm_worst->calls) : 0.0, 0},
            {"calm_worst_longest_call_ms", calm_worst ? to_ms(calm_worst->longest_call) : 0.0, 2},
            {"calm_worst_longest_call_cpu_ms", calm_worst ? to_ms(calm_worst->longest_call_cpu) : 0.0, 2},
            {"preempted_frames", preempted, 0},
            {"p99_frame_ms", frame.p99, 2},
            {"frames_over_interval", frames_over, 0},
            {"vblanks_missed", vblanks_missed, 0},
            {"frames_to_return", static_cast<double>(o.run.frames_to_return), 0},
            {"frames_bound", 1.2 * o.calls.work_ms / budget_ms + 2, 0},
            {"work_ms", o.calls.work_ms, 1},
            {"max_frame_close_ms", o.calls.max_frame_close_us / 1e3, 2}};
}

// ---- the timeline ---------------------------------------------------------------------------------

/// "1 frame", "3 frames".
std::string count_of(double n, const char* noun) {
    return std::to_string(std::lround(n)) + " " + noun + (std::lround(n) == 1 ? "" : "s");
}

/// One panel per strategy on a shared frame axis: a bar per frame (work in grey, teardown in red), the
/// frame interval as a dashed line, bars taller than 3 intervals cut and labelled with their time.
/// Sized to be read where a README shows it (about 800 px wide) without scaling the text down.
std::string svg_timeline(const std::vector<outcome>& runs, const std::vector<row>& rows, const settings& cfg) {
    constexpr double total_w = 800, left = 62, right = 14, plot_w = total_w - left - right;
    constexpr double title_h = 24, panel_h = 80, gap = 12;
    const double interval_ms = to_ms(cfg.interval()), y_max = 3 * interval_ms;
    std::size_t frames = 1;
    for (const auto& o : runs) frames = std::max(frames, o.run.frames.size());
    const double bar_w = plot_w / static_cast<double>(frames);
    const auto x_of = [&](double frame) { return left + frame * bar_w; };
    const double panels_h = static_cast<double>(runs.size()) * (title_h + panel_h + gap);
    const double axis_y = panels_h + 4, legend_y = axis_y + 44, total_h = legend_y + 26;
    // Tick spacing for the frame axis: the first that gives at most 10 ticks.
    constexpr std::size_t steps[] = {10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};
    std::size_t step = 0;
    for (const std::size_t s : steps) {
        step = s;
        if (frames / s <= 10) break;
    }

    std::ostringstream svg;
    svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << total_w << "\" height=\"" << total_h
        << "\" viewBox=\"0 0 " << total_w << ' ' << total_h << "\" font-family=\"DejaVu Sans, Verdana, sans-serif\" "
        << "font-size=\"13\">\n";
    svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const double y0 = static_cast<double>(i) * (title_h + panel_h + gap) + title_h;
        const auto y_of = [&](double ms) { return y0 + panel_h - std::min(ms, y_max) / y_max * panel_h; };
        svg << "<text x=\"" << left << "\" y=\"" << y0 - 8 << "\" font-weight=\"bold\">" << name(runs[i].which)
            << ": worst stall " << fixed(number(&rows[i], "worst_stall_ms"), 1) << " ms, "
            << count_of(number(&rows[i], "frames_over_interval"), "frame") << " over " << fixed(interval_ms, 1)
            << " ms, memory back after " << count_of(number(&rows[i], "frames_to_return"), "frame") << "</text>\n";
        // The y axis: 0, the frame interval and the cut-off, right-aligned against the plot.
        for (const double ms : {0.0, interval_ms, y_max})
            svg << "<text x=\"" << left - 6 << "\" y=\"" << y_of(ms) + 4 << "\" text-anchor=\"end\" font-size=\"12\">"
                << (ms == 0 ? std::string("0") : fixed(ms, 1) + " ms") << "</text>\n";
        svg << "<line x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << y0 << "\" y2=\"" << y_of(0)
            << "\" stroke=\"#444\"/>\n";
        svg << "<line x1=\"" << x_of(static_cast<double>(cfg.burst_frame)) << "\" x2=\""
            << x_of(static_cast<double>(cfg.burst_frame)) << "\" y1=\"" << y0 << "\" y2=\"" << y_of(0)
            << "\" stroke=\"#888\" stroke-dasharray=\"2 3\"/>\n";
        for (std::size_t f = 0; f < runs[i].run.frames.size(); ++f) {
            const auto& fr = runs[i].run.frames[f];
            const double x = x_of(static_cast<double>(f)), total = to_ms(fr.total);
            const double work = total - to_ms(fr.teardown);
            const double w = std::max(bar_w - 1, 1.0);
            svg << "<rect x=\"" << x << "\" y=\"" << y_of(work) << "\" width=\"" << w << "\" height=\""
                << y_of(0) - y_of(work) << "\" fill=\"#aaa\"/>";
            svg << "<rect x=\"" << x << "\" y=\"" << y_of(total) << "\" width=\"" << w << "\" height=\""
                << y_of(work) - y_of(total) << "\" fill=\"#d22\"/>\n";
            if (total > y_max)
                svg << "<text x=\"" << x + bar_w + 3 << "\" y=\"" << y0 + 12 << "\" fill=\"#d22\" font-size=\"12\">"
                    << std::lround(total) << " ms, cut</text>\n";
        }
        svg << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << y_of(interval_ms) << "\" y2=\""
            << y_of(interval_ms) << "\" stroke=\"#08f\" stroke-dasharray=\"5 3\"/>\n";
        svg << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << y_of(0) << "\" y2=\"" << y_of(0)
            << "\" stroke=\"#444\"/>\n";
    }
    // The frame axis, once, under the last panel: every panel shares it.
    for (std::size_t f = 0; f <= frames; f += step) {
        const double x = x_of(static_cast<double>(f));
        svg << "<line x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << axis_y - 4 << "\" y2=\"" << axis_y + 2
            << "\" stroke=\"#444\"/><text x=\"" << x << "\" y=\"" << axis_y + 16
            << "\" text-anchor=\"middle\" font-size=\"12\">" << f << "</text>\n";
    }
    svg << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << axis_y + 34 << "\" text-anchor=\"middle\">frame ("
        << cfg.hz << " Hz); " << cfg.pools << " pools (" << fixed(static_cast<double>(cfg.pools * cfg.pool_bytes) / (1 << 30), 2)
        << " GiB) die at frame " << cfg.burst_frame << ", the dotted line</text>\n";
    // The legend: one swatch per mark.
    double x = left;
    const auto swatch = [&](const std::string& mark, const std::string& label, double advance) {
        svg << mark << "<text x=\"" << x + 20 << "\" y=\"" << legend_y + 5 << "\">" << label << "</text>\n";
        x += advance;
    };
    const auto box = [&](const char* colour) {
        return "<rect x=\"" + fixed(x, 1) + "\" y=\"" + fixed(legend_y - 6, 1) + "\" width=\"14\" height=\"12\" fill=\"" +
               colour + "\"/>";
    };
    swatch(box("#aaa"), "the compositor's own work", 226);
    swatch(box("#d22"), "teardown on the frame thread", 236);
    swatch("<line x1=\"" + fixed(x, 1) + "\" x2=\"" + fixed(x + 14, 1) + "\" y1=\"" + fixed(legend_y, 1) + "\" y2=\"" +
               fixed(legend_y, 1) + "\" stroke=\"#08f\" stroke-width=\"2\" stroke-dasharray=\"5 3\"/>",
           "the frame interval", 0);
    svg << "</svg>\n";
    return svg.str();
}

/// The targets the burst measures: the frame thread's worst and p99 drain, and memory back in time.
/// A target whose strategies were not run (--strategies) is left out rather than reported as missed.
std::vector<row> targets(const std::vector<row>& rows, const settings& cfg) {
    const auto at = [&](std::string_view s) -> const row* {
        for (const auto& r : rows)
            if (text(r, "strategy") == s) return &r;
        return nullptr;
    };
    const double budget_ms = cfg.budget_us / 1e3;
    std::vector<row> out;
    const auto add = [&](std::initializer_list<std::string_view> needs, std::string what, double value, double limit) {
        for (std::string_view n : needs)
            if (at(n) == nullptr) return;
        out.push_back(target(std::move(what), value, limit));
    };
    const row* qw = at("queue+worker");
    const row* cf = at("close-first");
    add({"queue+worker"}, "queue+worker p99 stall ms", number(qw, "p99_stall_ms"), 1.25 * budget_ms);
    add({"queue+worker"}, "queue+worker worst stall ms", number(qw, "worst_stall_ms"), 2 * budget_ms);
    add({"queue+worker"}, "queue+worker p99 stall ms, not preempted", number(qw, "calm_p99_stall_ms"), 1.25 * budget_ms);
    add({"queue+worker"}, "queue+worker worst stall ms, not preempted", number(qw, "calm_worst_stall_ms"), 2 * budget_ms);
    add({"queue+worker", "close-first"}, "queue+worker worst / close-first worst",
        number(qw, "worst_stall_ms") / number(cf, "worst_stall_ms"), 1.0 / 50);
    add({"queue+worker", "close-first"}, "same, not preempted",
        number(qw, "calm_worst_stall_ms") / number(cf, "worst_stall_ms"), 1.0 / 50);
    const double largest_step = std::max(budget_ms, number(at("queue"), "max_frame_close_ms"));
    add({"queue"}, "queue worst stall ms", number(at("queue"), "worst_stall_ms"), 1.25 * largest_step);
    add({"queue"}, "queue worst stall ms, not preempted", number(at("queue"), "calm_worst_stall_ms"), 1.25 * largest_step);
    for (const char* q : {"queue", "queue+worker", "queue+worker-unmap"})
        add({q}, std::string(q) + " frames to return", number(at(q), "frames_to_return"), number(at(q), "frames_bound"));
    return out;
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
    const settings cfg = parse(argc, argv);
    const row machine = machine_info();
    print_machine(machine);
    std::printf("%zu pools of %.1f MiB die at frame %zu; %u Hz, %u us of work per frame, %u us drain budget, "
                "steps sized for %g deviations\n\n",
                cfg.pools, static_cast<double>(cfg.pool_bytes) / (1 << 20), cfg.burst_frame, cfg.hz, cfg.work_us,
                cfg.budget_us, cfg.max_step_deviations);
    std::vector<outcome> runs;
    std::vector<row> rows;
    for (strategy s : cfg.strategies) {
        runs.push_back(run_strategy(s, cfg));
        rows.push_back(figures(runs.back(), cfg));
    }
    progress_done();
    print_table(stdout, rows, {{"strategy", "strategy"}, {"worst_stall_ms", "worst stall ms"}, {"p99_stall_ms", "p99 stall"},
                               {"calm_worst_stall_ms", "calm worst"}, {"calm_p99_stall_ms", "calm p99"},
                               {"calm_worst_calls", "its calls"}, {"calm_worst_longest_call_ms", "longest"},
                               {"calm_worst_longest_call_cpu_ms", "its cpu"},
                               {"preempted_frames", "preempted"},
                               {"p99_frame_ms", "p99 frame ms"}, {"frames_over_interval", "frames over"},
                               {"vblanks_missed", "vblanks missed"}, {"frames_to_return", "frames to return"},
                               {"frames_bound", "bound"}, {"work_ms", "work ms"}, {"max_frame_close_ms", "max close ms"}});
    nanoseconds setup{0}, loop{0};
    for (const auto& o : runs) {
        setup += o.setup;
        loop += o.loop;
    }
    std::printf("\ntime: %.1f s making pools (writing and reading every page), %.1f s in frame loops\n",
                to_ms(setup) / 1e3, to_ms(loop) / 1e3);
    const auto goals = targets(rows, cfg);
    print_targets(goals);
    if (!cfg.svg.empty()) write_file(cfg.svg, svg_timeline(runs, rows, cfg));
    if (!cfg.csv.empty()) write_csv(cfg.csv, rows);
    const row settings{{"hz", static_cast<double>(cfg.hz), 0},
                       {"pools", static_cast<double>(cfg.pools), 0},
                       {"pool_bytes", static_cast<double>(cfg.pool_bytes), 0},
                       {"budget_us", static_cast<double>(cfg.budget_us), 0},
                       {"drain_pause_us", static_cast<double>(cfg.drain_pause_us), 0},
                       {"max_step_deviations", cfg.max_step_deviations, 2},
                       {"work_us", static_cast<double>(cfg.work_us), 0}};
    if (!cfg.json.empty()) write_json(cfg.json, machine, {{"settings", {settings}}, {"rows", rows}, {"targets", goals}});
}

// Expected output (2-core VM under load; times vary by machine, the shape does not):
//   machine: source=bb3bab160868; date=2026-12-05T13:02:49Z; kernel=6.18.44; cpus=2; cpu_model=AMD EPYC; ...; loadavg_1min=4.98;
//   52 pools of 19.8 MiB die at frame 20; 60 Hz, 2000 us of work per frame, 1000 us drain budget
//
//             strategy  worst stall ms  p99 stall  calm worst  calm p99  ...  vblanks missed  frames to return  ...
//          close-first          196.62     196.62        0.00      0.00  ...              11                 1  ...
//          unmap-first          246.07     246.07        0.00      0.00  ...              14                 1  ...
//          thread-drop            0.80       0.80        0.80      0.80  ...               0                25  ...
//                queue           10.54       8.51        2.71      2.56  ...               0               214  ...
//         queue+worker            8.45       6.74        1.10      1.10  ...               0               121  ...
//   queue+worker-unmap            1.98       1.98        0.05      0.05  ...               0                29  ...
//
//   time: 30.1 s making pools (writing and reading every page), 10.9 s in frame loops
//
//   targets:
//     queue+worker p99 stall ms, not preempted                1.100  <=    1.250  met
//     ...

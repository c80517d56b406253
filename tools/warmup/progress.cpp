#include "progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

namespace mlajit::cli {

namespace {
// A line longer than the terminal wraps, and \r then redraws only its last row: clip to the width.
size_t terminal_columns() {
    struct winsize ws{};
    if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

const char* outcome_word(Progress::Outcome o) {
    switch (o) {
        case Progress::Outcome::compiled: return "compiled";
        case Progress::Outcome::cached: return "cached  ";
        case Progress::Outcome::failed: return "FAILED  ";
    }
    return "?";
}
}  // namespace

Progress::Progress(size_t total, bool live) : total_(total), live_(live) {
    if (live_) ticker_ = std::thread([this] { ticker(); });
}

Progress::~Progress() { finish(); }

void Progress::started(const std::string& kernel) {
    std::lock_guard<std::mutex> g(m_);
    in_flight_.push_back(kernel);
    if (live_) redraw_locked();
}

void Progress::finished(const std::string& kernel, Outcome outcome, double seconds) {
    std::lock_guard<std::mutex> g(m_);
    ++done_;
    if (auto it = std::find(in_flight_.begin(), in_flight_.end(), kernel); it != in_flight_.end()) in_flight_.erase(it);
    if (!live_) {
        std::fprintf(stderr, "[%zu/%zu] %s %s (%.2f s)\n", done_, total_, outcome_word(outcome), kernel.c_str(), seconds);
        return;
    }
    // Failures stay on screen above the live line; the details come with the summary.
    if (outcome == Outcome::failed) std::fprintf(stderr, "\r\033[KFAILED %s\n", kernel.c_str());
    redraw_locked();
}

void Progress::redraw_locked() {
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::string line = fmt::format("[{}/{}] {:.1f}s", done_, total_, elapsed);
    const size_t cols = terminal_columns();
    if (!in_flight_.empty()) {
        line += " compiling";
        if (in_flight_.size() > 1) line += fmt::format(" (+{} more)", in_flight_.size() - 1);
        line += " ";
        // Spec names differ at both ends (family ... MASKED=1 ... @arch): elide the middle to fit.
        std::string name = in_flight_.back();
        const size_t room = cols > line.size() + 1 ? cols - line.size() - 1 : 0;
        if (name.size() > room && room >= 12) {
            const size_t tail = room / 2;
            name = name.substr(0, room - tail - 3) + "..." + name.substr(name.size() - tail);
        }
        line += name;
    }
    if (line.size() >= cols) line.resize(cols - 1);
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
}

void Progress::ticker() {
    std::unique_lock<std::mutex> g(m_);
    while (!stop_) {
        cv_.wait_for(g, std::chrono::milliseconds(200));
        if (!stop_) redraw_locked();
    }
}

void Progress::finish() {
    {
        std::lock_guard<std::mutex> g(m_);
        if (stop_) return;
        stop_ = true;
        if (live_) {
            redraw_locked();
            std::fprintf(stderr, "\n");
        }
    }
    cv_.notify_all();
    if (ticker_.joinable()) ticker_.join();
}

}  // namespace mlajit::cli

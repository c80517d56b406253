// Warmup progress on stderr. On a terminal: one live line, redrawn in place (done/total, the kernel being
// compiled, elapsed time), with failures printed above it. Otherwise (logs, CI): one plain line per kernel,
// so the output stays readable without terminal control codes. Thread-safe.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mlajit::cli {

class Progress {
public:
    enum class Outcome { compiled, cached, failed };

    // live: redraw one line (use isatty(stderr)).
    Progress(size_t total, bool live);
    ~Progress();  // finish() if not done yet
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    void started(const std::string& kernel);
    void finished(const std::string& kernel, Outcome outcome, double seconds);
    // Stops redrawing and ends the live line.
    void finish();

private:
    void redraw_locked();
    void ticker();

    const size_t total_;
    const bool live_;
    const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
    std::mutex m_;
    std::condition_variable cv_;
    bool stop_ = false;
    size_t done_ = 0;
    std::vector<std::string> in_flight_;  // in start order
    std::thread ticker_;
};

}  // namespace mlajit::cli

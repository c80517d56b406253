// Collects what the library logs (its "mlajit" logger) while in scope, and keeps it off stderr, so a
// test can count warnings and read their text.
#pragma once
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"

namespace mlajit::test {

class CollectingSink : public spdlog::sinks::base_sink<std::mutex> {
public:
    std::vector<std::pair<spdlog::level::level_enum, std::string>> messages() {
        std::lock_guard<std::mutex> g(this->mutex_);
        return msgs_;
    }

protected:
    void sink_it_(const spdlog::details::log_msg& m) override {
        msgs_.emplace_back(m.level, std::string(m.payload.data(), m.payload.size()));
    }
    void flush_() override {}

private:
    std::vector<std::pair<spdlog::level::level_enum, std::string>> msgs_;
};

class LogCapture {
public:
    LogCapture() {
        mlajit::log();  // created on first use: capture that logger
        logger_ = spdlog::get("mlajit");
        if (!logger_) logger_ = spdlog::default_logger();
        old_level_ = logger_->level();
        if (old_level_ > spdlog::level::warn) logger_->set_level(spdlog::level::warn);
        old_sinks_ = logger_->sinks();
        logger_->sinks() = {sink_};
    }
    ~LogCapture() {
        logger_->sinks() = old_sinks_;
        logger_->set_level(old_level_);
    }
    LogCapture(const LogCapture&) = delete;
    LogCapture& operator=(const LogCapture&) = delete;

    size_t warnings() {
        auto m = sink_->messages();
        return size_t(std::count_if(m.begin(), m.end(), [](const auto& x) { return x.first == spdlog::level::warn; }));
    }
    std::string all() {
        std::string s;
        for (const auto& x : sink_->messages()) s += x.second + "\n";
        return s;
    }

private:
    std::shared_ptr<spdlog::logger> logger_;
    std::shared_ptr<CollectingSink> sink_ = std::make_shared<CollectingSink>();
    std::vector<spdlog::sink_ptr> old_sinks_;
    spdlog::level::level_enum old_level_ = spdlog::level::warn;
};

}  // namespace mlajit::test

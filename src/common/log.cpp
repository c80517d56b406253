#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "config/env.h"

namespace mlajit {

spdlog::logger& log() {
    static std::shared_ptr<spdlog::logger> logger = [] {
        auto existing = spdlog::get("mlajit");
        if (existing) return existing;
        auto l = spdlog::stderr_color_mt("mlajit");
        l->set_pattern("[mlajit %L] %v");
        // A bad variable elsewhere must not make logging throw: its error surfaces where config() is used.
        try {
            l->set_level(config().log_level);
        } catch (...) {
            l->set_level(spdlog::level::warn);
        }
        return l;
    }();
    return *logger;
}

}  // namespace mlajit

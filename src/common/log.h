// The library's logger ("mlajit"), to stderr, level from MLAJIT_LOG_LEVEL (default warn).
#pragma once
#include <spdlog/spdlog.h>

namespace mlajit {
spdlog::logger& log();
}

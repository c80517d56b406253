// Sets (or, with value nullptr, unsets) one environment variable for a scope and makes mlajit re-read its configuration;
// the old value and the configuration come back at scope exit, also when a REQUIRE or a library error leaves the test
// early. Without it, a test that failed between its own setenv and unsetenv left the variable set for every later test
// in the process (MLAJIT_DUMP_DIR, MLAJIT_TIER, ...), so one failure could turn into many unrelated ones.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

#include "config/env.h"

namespace mlajit::test {

class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* v = std::getenv(name)) old_ = v;
        set(value);
    }
    ~ScopedEnv() { set(old_ ? old_->c_str() : nullptr); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

    // Another value within the same scope (nullptr: unset); the original still comes back at scope exit.
    void set(const char* value) {
        if (value) ::setenv(name_.c_str(), value, 1);
        else ::unsetenv(name_.c_str());
        reload_config();
    }

private:
    std::string name_;
    std::optional<std::string> old_;
};

}  // namespace mlajit::test

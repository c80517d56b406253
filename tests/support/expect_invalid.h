// Runs a call that must reject its arguments: it has to throw Error(INVALID_ARGUMENT), and the message is
// returned so the test can check that it names the argument, the expected and the got.
#pragma once
#include <doctest/doctest.h>

#include <string>

#include "common/error.h"

namespace mlajit::test {

template <typename F>
std::string invalid(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        CHECK(e.status() == MLAJIT_ERROR_INVALID_ARGUMENT);
        return e.what();
    }
    FAIL("the bad argument was accepted");
    return "";
}

inline bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace mlajit::test

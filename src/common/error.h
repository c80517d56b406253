// One error type for the whole runtime: a status code the C API returns plus a message that says what was
// wrong and what to do. Internal code throws; the C API boundary catches and stores the message.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include "mlajit/mlajit.h"

namespace mlajit {

class Error : public std::runtime_error {
public:
    Error(mlajit_status status, std::string message) : std::runtime_error(std::move(message)), status_(status) {}
    mlajit_status status() const { return status_; }

private:
    mlajit_status status_;
};

template <typename... Args>
[[noreturn]] void fail(mlajit_status status, fmt::format_string<Args...> f, Args&&... args) {
    throw Error(status, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void fail_arg(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(MLAJIT_ERROR_INVALID_ARGUMENT, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace mlajit

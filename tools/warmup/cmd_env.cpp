// `env`: every environment variable mlajit reads, with its current value, default and meaning, and
// whether the library would accept the value.
#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "cli.h"
#include "config/env.h"

namespace mlajit::cli {
namespace {

struct Flags {
    bool json = false;
};

// The library reads the environment only in config/env.cpp; showing the raw text needs the raw value,
// which parse_config() does not keep. Read-only and for display: configuration still comes from config().
std::optional<std::string> raw_value(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
}

// Why the library would reject this variable's value, or empty.
std::string problem_with(const char* name, const std::optional<std::string>& value) {
    if (!value) return {};
    try {
        parse_config([&](const char* n) -> std::optional<std::string> {
            if (std::string_view(n) == name) return value;
            return std::nullopt;
        });
        return {};
    } catch (const std::exception& e) {
        return e.what();
    }
}

int run(const Flags& f) {
    nlohmann::json j = nlohmann::json::array();
    std::vector<std::vector<std::string>> rows;
    bool any_bad = false;
    for (const auto& d : env_var_docs()) {
        auto v = raw_value(d.name);
        std::string problem = problem_with(d.name, v);
        any_bad |= !problem.empty();
        nlohmann::json e = {{"name", d.name}, {"default", d.default_value}, {"meaning", d.meaning}};
        e["value"] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
        if (!problem.empty()) e["problem"] = problem;
        j.push_back(std::move(e));
        rows.push_back({d.name, v ? "'" + *v + "'" + (problem.empty() ? "" : " (INVALID)") : "(unset)",
                        d.default_value, d.meaning});
    }
    std::string root;
    try {
        root = default_cache_root_from(config()).string();
    } catch (const std::exception&) {
        root = "(unknown: an environment variable is invalid)";
    }
    if (f.json) {
        std::cout << nlohmann::json{{"variables", j}, {"cache_root", root}}.dump(2, ' ', false,
                                                                                   nlohmann::json::error_handler_t::replace)
                  << "\n";
    } else {
        print_table(std::cout, {"NAME", "VALUE", "DEFAULT", "MEANING"}, rows);
        std::cout << "\ncache root in effect: " << root << "\n";
        for (const auto& e : j)
            if (e.contains("problem")) std::cout << "\n" << e["problem"].get<std::string>() << "\n";
    }
    return any_bad ? kExitUsage : kExitOk;
}

[[maybe_unused]] const bool registered = register_command({
    "env",
    "show every environment variable mlajit reads: current value, default, meaning",
    90,
    [](CLI::App& sub) -> Runner {
        auto f = std::make_shared<Flags>();
        sub.add_flag("--json", f->json, "print JSON on stdout instead of a table");
        return [f] { return run(*f); };
    },
});

}  // namespace
}  // namespace mlajit::cli

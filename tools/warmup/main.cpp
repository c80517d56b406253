// mlajit-warmup: prebuilds and maintains the kernel cache. The subcommands register themselves (cli.h);
// this file parses, dispatches and turns every failure into a message and an exit code.
#include <fmt/format.h>

#include <cstring>
#include <iostream>
#include <map>

#include "cli.h"
#include "common/error.h"
#include "mlajit/mlajit.h"

namespace {

using namespace mlajit::cli;

// "mlajit-warmup --tp 8 --arch sm_90a" means the warmup subcommand: insert its name unless the first
// argument names a subcommand or asks the top level for help or the version. Empty: argv[1] names no
// subcommand (CLI11 would report it mixed up with the arguments after it).
std::vector<const char*> with_default_command(int argc, char** argv, const std::vector<CommandDef>& cmds) {
    std::vector<const char*> args(argv, argv + argc);
    if (argc >= 2) {
        std::string first = argv[1];
        if (first == "-h" || first == "--help" || first == "--version") return args;
        for (const auto& c : cmds)
            if (first == c.name) return args;
        if (first.empty() || first[0] != '-') return {};  // an unknown subcommand
    }
    args.insert(args.begin() + 1, kDefaultCommand);
    return args;
}

// Bad values given through flags or the environment are usage errors: nothing was attempted.
bool is_usage_status(mlajit_status s) {
    return s == MLAJIT_ERROR_INVALID_ARGUMENT || s == MLAJIT_ERROR_CONFIG || s == MLAJIT_ERROR_UNSUPPORTED;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Prebuilds and maintains mlajit's kernel cache (also on machines with no GPU).", "mlajit-warmup"};
    app.require_subcommand(0, 1);
    app.set_version_flag("--version", fmt::format("mlajit-warmup {}.{}", MLAJIT_VERSION_MAJOR, MLAJIT_VERSION_MINOR));
    app.footer(fmt::format("With no subcommand, runs '{}' (e.g. mlajit-warmup --tp 1,8 --arch sm_90a).\n"
                           "Environment variables (see 'mlajit-warmup env') apply as in the library; flags override "
                           "them.\nExit codes: 0 success, 1 some work failed, 2 bad usage.",
                           kDefaultCommand));

    const auto cmds = registered_commands();
    std::map<const CLI::App*, std::pair<std::string, Runner>> runners;
    for (const auto& c : cmds) {
        CLI::App* sub = app.add_subcommand(c.name, c.summary);
        runners[sub] = {c.name, c.setup(*sub)};
    }

    auto args = with_default_command(argc, argv, cmds);
    if (args.empty()) {
        std::string known;
        for (const auto& c : cmds) known += (known.empty() ? "" : ", ") + c.name;
        std::cerr << "mlajit-warmup: '" << argv[1] << "' is not a subcommand: use one of " << known
                  << " (see mlajit-warmup --help)\n";
        return kExitUsage;
    }
    try {
        app.parse(int(args.size()), args.data());
    } catch (const CLI::ParseError& e) {
        // CLI11 prints help/version (code 0) or the error naming the flag; every error is a usage error.
        return app.exit(e) == 0 ? kExitOk : kExitUsage;
    }

    auto parsed = app.get_subcommands();
    if (parsed.empty()) {
        std::cerr << app.help();
        return kExitUsage;
    }
    const auto& [name, run] = runners.at(parsed.front());
    try {
        return run();
    } catch (const UsageError& e) {
        std::cerr << "mlajit-warmup " << name << ": error: " << e.what() << "\nRun 'mlajit-warmup " << name
                  << " --help' for the flags.\n";
        return kExitUsage;
    } catch (const mlajit::Error& e) {
        std::cerr << "mlajit-warmup " << name << ": error: " << e.what() << "\n";
        return is_usage_status(e.status()) ? kExitUsage : kExitFailed;
    } catch (const std::exception& e) {
        std::cerr << "mlajit-warmup " << name << ": error: " << e.what() << "\n";
        return kExitFailed;
    }
}

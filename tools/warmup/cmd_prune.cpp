// `prune`: removes other cache-format versions and leftovers of interrupted stores, then (with
// --max-bytes) the least recently used entries until the cache fits.
#include <fmt/format.h>

#include <iostream>
#include <limits>

#include "cli.h"

namespace mlajit::cli {
namespace {

struct Flags {
    std::string cache_dir;
    std::string max_bytes;  // parsed by parse_byte_size (suffixes)
};

int run(const Flags& f) {
    DiskCache disk(cache_root(f.cache_dir), maintenance_mode());
    require_writable(disk, "prune");
    const uint64_t budget =
        f.max_bytes.empty() ? std::numeric_limits<uint64_t>::max() : parse_byte_size("--max-bytes", f.max_bytes);
    CachePruneReport r = disk.prune(budget);
    print_table(std::cout, {"other versions removed", "temporaries removed", "entries removed", "bytes removed", "bytes kept"},
                {{std::to_string(r.versions_removed), std::to_string(r.temporaries_removed),
                  std::to_string(r.entries_removed), fmt::format("{} ({})", r.bytes_removed, human_bytes(r.bytes_removed)),
                  fmt::format("{} ({})", r.bytes_kept, human_bytes(r.bytes_kept))}});
    return kExitOk;
}

[[maybe_unused]] const bool registered = register_command({
    "prune",
    "remove other format versions, stale temporaries and (with --max-bytes) least recently used entries",
    40,
    [](CLI::App& sub) -> Runner {
        auto f = std::make_shared<Flags>();
        add_cache_dir_flag(sub, f->cache_dir);
        sub.add_option("--max-bytes", f->max_bytes,
                       "keep the entries within this size, least recently used go first (e.g. 500M, 20G)")
            ->check(CLI::Validator(
                [](std::string& s) -> std::string {
                    try {
                        parse_byte_size("--max-bytes", s);
                        return {};
                    } catch (const UsageError& e) {
                        return e.what();
                    }
                },
                "SIZE"));
        return [f] { return run(*f); };
    },
});

}  // namespace
}  // namespace mlajit::cli

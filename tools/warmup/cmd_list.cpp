// `list`: the entries of the cache (this format version), as a table or as JSON for scripts.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"

namespace mlajit::cli {
namespace {

struct Flags {
    std::string cache_dir;
    std::vector<std::string> archs;  // filter; empty = all
    bool json = false;
};

int run(const Flags& f) {
    DiskCache disk(cache_root(f.cache_dir), maintenance_mode());
    auto entries = disk.list();
    if (!f.archs.empty())
        std::erase_if(entries, [&](const CacheEntryInfo& e) {
            return std::find(f.archs.begin(), f.archs.end(), e.arch) == f.archs.end();
        });

    uint64_t total = 0;
    for (const auto& e : entries) total += e.disk_bytes;
    // The spec name is the meta's; an entry whose meta is unreadable still lists (verify says why).
    auto spec_of = [](const CacheEntryInfo& e) {
        return e.meta.is_object() ? e.meta.value("spec", std::string("?")) : std::string("(unreadable meta.json)");
    };

    if (f.json) {
        nlohmann::json j = {{"cache_dir", disk.root().string()}, {"entries", nlohmann::json::array()}};
        for (const auto& e : entries)
            j["entries"].push_back({{"arch", e.arch},
                                    {"family", e.family},
                                    {"key", e.key.hex()},
                                    {"spec", spec_of(e)},
                                    {"cubin_bytes", e.cubin_bytes},
                                    {"disk_bytes", e.disk_bytes},
                                    {"age_seconds", age_of(e.last_used).count()},
                                    {"dir", e.dir.string()}});
        j["total_bytes"] = total;
        std::cout << j.dump(2) << "\n";
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& e : entries)
        rows.push_back({e.arch, e.family, e.key.hex(), human_bytes(e.cubin_bytes), human_age(age_of(e.last_used)),
                        spec_of(e)});
    if (!rows.empty()) print_table(std::cout, {"ARCH", "FAMILY", "KEY", "SIZE", "AGE", "SPEC"}, rows);
    std::cout << fmt::format("{} entr{}, {} on disk, in {}\n", entries.size(), entries.size() == 1 ? "y" : "ies",
                             human_bytes(total), disk.version_dir().string());
    return kExitOk;
}

[[maybe_unused]] const bool registered = register_command({
    "list",
    "list the cache entries: arch, family, key, size, age (since last use), spec",
    20,
    [](CLI::App& sub) -> Runner {
        auto f = std::make_shared<Flags>();
        add_cache_dir_flag(sub, f->cache_dir);
        sub.add_option("--arch", f->archs, "only these archs, comma-separated")->delimiter(',')->check(arch_validator());
        sub.add_flag("--json", f->json, "print JSON on stdout instead of a table");
        return [f] { return run(*f); };
    },
});

}  // namespace
}  // namespace mlajit::cli

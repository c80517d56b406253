// `import`: unpacks an archive written by `export` into the cache, keys unchanged. The whole archive is
// checked (structure, checksums, every path) before anything is written, and each entry is published
// through DiskCache::store, so readers see whole entries or none, and a bad archive changes nothing.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "archive.h"
#include "cli.h"

namespace mlajit::cli {
namespace {

struct Flags {
    std::string cache_dir;
    std::string file;
};

struct Entry {
    std::string arch, family;
    CacheKey key;
    std::optional<std::vector<char>> cubin;
    std::optional<nlohmann::json> meta;
};

// The rule DiskCache applies to arch and family names; checked here too, so that no path component of an
// archive can climb out of the cache ("..", "/", leading dots) whatever the cache does later.
bool plain_component(std::string_view s) {
    if (s.empty() || s.size() > 128 || s[0] == '.') return false;
    for (char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    return true;
}

[[noreturn]] void refuse(const std::string& file, const std::string& path, const std::string& why) {
    throw std::runtime_error(fmt::format("refusing to import {}: its entry '{}' {}. Nothing was imported; use an "
                                         "archive written by 'mlajit-warmup export'",
                                         file, path, why));
}

std::map<std::string, Entry> entries_of(const Archive& a, const std::string& file) {
    std::map<std::string, Entry> out;
    for (const auto& f : a.files) {
        std::vector<std::string_view> parts;
        std::string_view rest = f.path;
        for (size_t slash; (slash = rest.find('/')) != std::string_view::npos; rest.remove_prefix(slash + 1))
            parts.push_back(rest.substr(0, slash));
        parts.push_back(rest);
        if (parts.size() != 4) refuse(file, f.path, "is not of the form <arch>/<family>/<key>/<file>");
        for (auto p : parts)
            if (!plain_component(p))
                refuse(file, f.path, "has a component that is empty, starts with '.' or holds characters other than "
                                     "letters, digits, '_', '-', '.'");
        if (parts[0] == "tmp" || parts[0] == "locks") refuse(file, f.path, "names a cache-internal directory");
        auto key = CacheKey::from_hex(parts[2]);
        if (!key) refuse(file, f.path, "has a key that is not 32 hex digits");
        const std::string dir = f.path.substr(0, f.path.size() - parts[3].size());
        Entry& e = out[dir];
        e.arch = parts[0];
        e.family = parts[1];
        e.key = *key;
        if (parts[3] == "kernel.cubin") {
            if (e.cubin) refuse(file, f.path, "appears twice");
            e.cubin = f.data;
        } else if (parts[3] == "meta.json") {
            if (e.meta) refuse(file, f.path, "appears twice");
            auto j = nlohmann::json::parse(f.data.begin(), f.data.end(), nullptr, false);
            if (j.is_discarded() || !j.is_object()) refuse(file, f.path, "is not a JSON object");
            e.meta = std::move(j);
        } else {
            refuse(file, f.path, "is neither kernel.cubin nor meta.json");
        }
    }
    for (const auto& [dir, e] : out) {
        if (!e.cubin || !e.meta) refuse(file, dir, "lacks its kernel.cubin or its meta.json");
        // The cache rewrites these fields on store; disagreeing ones mean the entry was moved or edited.
        const std::pair<const char*, std::string> expected[] = {
            {"arch", e.arch}, {"family", e.family}, {"key", e.key.hex()}, {"cubin_xxh3_128", xxh3_128(*e.cubin).hex()}};
        for (const auto& [field, want] : expected)
            if (e.meta->contains(field) && e.meta->at(field) != want)
                refuse(file, dir, fmt::format("has meta.json field {}={} where its path or cubin says {}", field,
                                              e.meta->at(field).dump(), want));
    }
    return out;
}

int run(const Flags& f) {
    Archive a = read_archive(f.file);
    if (a.cache_format != uint32_t(DiskCache::kFormatVersion))
        throw std::runtime_error(fmt::format("{} holds cache format version {} entries; this mlajit uses version {}: "
                                             "export them with an mlajit of the same version, or warm up here",
                                             f.file, a.cache_format, DiskCache::kFormatVersion));
    const auto entries = entries_of(a, f.file);

    DiskCache disk(cache_root(f.cache_dir), maintenance_mode());
    require_writable(disk, "import");
    size_t fresh = 0, present = 0;
    for (const auto& [dir, e] : entries) {
        std::error_code ec;
        const bool existed = std::filesystem::exists(disk.entry_dir(e.arch, e.family, e.key) / "kernel.cubin", ec);
        if (!disk.store(e.arch, e.family, e.key, *e.cubin, *e.meta))
            throw std::runtime_error(fmt::format("could not write entry {} into {} (see the warning above); {} of {} "
                                                 "entries were imported. Make the cache writable and import again",
                                                 dir, disk.version_dir().string(), fresh + present, entries.size()));
        (existed ? present : fresh)++;
    }
    std::cout << fmt::format("imported {} entries into {}: {} new, {} already present\n", entries.size(),
                             disk.version_dir().string(), fresh, present);
    return kExitOk;
}

[[maybe_unused]] const bool registered = register_command({
    "import",
    "unpack an archive written by 'export' into the cache (keys unchanged, each entry atomic)",
    60,
    [](CLI::App& sub) -> Runner {
        auto f = std::make_shared<Flags>();
        add_cache_dir_flag(sub, f->cache_dir);
        sub.add_option("file", f->file, "archive written by 'mlajit-warmup export'")->required();
        return [f] { return run(*f); };
    },
});

}  // namespace
}  // namespace mlajit::cli

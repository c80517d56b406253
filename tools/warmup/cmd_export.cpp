// `export`: packs the cache entries of the given arch(s) into one archive file (format: archive.h).
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "archive.h"
#include "cli.h"

namespace mlajit::cli {
namespace {

struct Flags {
    std::string cache_dir;
    std::vector<std::string> archs;
    std::string output;
};

bool read_file(const std::filesystem::path& p, std::vector<char>& out) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return false;
    out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return !in.bad();
}

// Why the entry must not be shipped, or empty. Shipping a damaged entry would spread it to every importer.
std::string check_entry(const std::vector<char>& cubin, const std::vector<char>& meta_text) {
    auto meta = nlohmann::json::parse(meta_text.begin(), meta_text.end(), nullptr, false);
    if (meta.is_discarded() || !meta.is_object()) return "meta.json is not a JSON object";
    if (meta.value("cubin_bytes", uint64_t(0)) != cubin.size()) return "kernel.cubin has the wrong size";
    if (meta.value("cubin_xxh3_128", std::string()) != xxh3_128(cubin).hex()) return "kernel.cubin fails its checksum";
    return {};
}

int run(const Flags& f) {
    DiskCache disk(cache_root(f.cache_dir), maintenance_mode());
    std::vector<std::string> archs;
    for (const auto& a : resolve_archs(f.archs)) archs.push_back(a.name());

    Archive archive;
    archive.cache_format = DiskCache::kFormatVersion;
    size_t entries = 0, skipped = 0;
    uint64_t bytes = 0;
    for (const auto& e : disk.list()) {
        if (std::find(archs.begin(), archs.end(), e.arch) == archs.end()) continue;
        std::vector<char> cubin, meta;
        std::string problem;
        if (!read_file(e.dir / "kernel.cubin", cubin) || !read_file(e.dir / "meta.json", meta))
            problem = "its files cannot be read";
        else
            problem = check_entry(cubin, meta);
        if (!problem.empty()) {
            std::cerr << fmt::format("export: skipping {}: {}; run 'mlajit-warmup verify --remove-bad' and warm it "
                                     "up again\n",
                                     e.dir.string(), problem);
            ++skipped;
            continue;
        }
        const std::string prefix = fmt::format("{}/{}/{}/", e.arch, e.family, e.key.hex());
        bytes += cubin.size() + meta.size();
        archive.files.push_back({prefix + "meta.json", std::move(meta)});
        archive.files.push_back({prefix + "kernel.cubin", std::move(cubin)});
        ++entries;
    }
    std::string arch_list;
    for (const auto& a : archs) arch_list += (arch_list.empty() ? "" : ",") + a;
    if (entries == 0)
        throw std::runtime_error(fmt::format("no {}entries for {} in {}: nothing to export. Fill the cache first "
                                             "(mlajit-warmup --arch {}) or point --cache-dir at it",
                                             skipped ? "intact " : "", arch_list, disk.version_dir().string(),
                                             arch_list));
    write_archive(f.output, archive);
    std::cout << fmt::format("exported {} entries for {} ({}) to {}\n", entries, arch_list, human_bytes(bytes),
                             f.output);
    if (skipped) {
        std::cerr << fmt::format("export: {} damaged entr{} left out (above)\n", skipped, skipped == 1 ? "y" : "ies");
        return kExitFailed;
    }
    return kExitOk;
}

[[maybe_unused]] const bool registered = register_command({
    "export",
    "pack one arch's cache entries into an archive file, for 'import' on another machine",
    50,
    [](CLI::App& sub) -> Runner {
        auto f = std::make_shared<Flags>();
        add_cache_dir_flag(sub, f->cache_dir);
        sub.add_option("--arch", f->archs, "arch(s) to export, comma-separated (default: MLAJIT_ARCH, else the local GPUs')")
            ->delimiter(',')
            ->check(arch_validator());
        sub.add_option("-o,--output", f->output, "archive file to write (replaced atomically)")->required();
        return [f] { return run(*f); };
    },
});

}  // namespace
}  // namespace mlajit::cli

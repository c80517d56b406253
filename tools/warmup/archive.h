// The cache archive written by `export` and read by `import`: one file holding cache entries, so a cache
// built on one machine can be shipped to another (an air-gapped cluster, a container image) with its keys
// unchanged. All integers are little-endian.
//
//   header (24 bytes)
//     char[8]  magic "MLAJITAR"
//     u32      archive format version (kArchiveVersion)
//     u32      cache format version of the entries (DiskCache::kFormatVersion of the exporting build)
//     u64      number of file records
//   file record, repeated
//     u32      path length P, 1..kMaxPathBytes
//     u32      reserved, 0
//     u64      data size S, at most kMaxFileBytes
//     u64      XXH3-128 of the data, high half
//     u64      XXH3-128 of the data, low half
//     P bytes  path relative to the cache's v<N>/ directory: <arch>/<family>/<key>/<file>
//     S bytes  data
//   trailer (16 bytes)
//     char[8]  "MLAJEND\0"
//     u64      number of file records (again: a truncated or concatenated file fails)
//
// An entry is two records with the same <arch>/<family>/<key>/: kernel.cubin and meta.json. This layer
// checks structure and checksums only; what a path may name is the importer's business.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mlajit::cli {

inline constexpr uint32_t kArchiveVersion = 1;
inline constexpr uint32_t kMaxPathBytes = 1024;
inline constexpr uint64_t kMaxFileBytes = uint64_t(1) << 30;

struct ArchiveFile {
    std::string path;
    std::vector<char> data;
};

struct Archive {
    uint32_t cache_format = 0;
    std::vector<ArchiveFile> files;
};

// Writes atomically (a temporary next to `dest`, fsync, rename): `dest` is the old file or the whole new one.
// Throws std::runtime_error naming the file and the system error.
void write_archive(const std::filesystem::path& dest, const Archive& archive);

// Reads the whole archive and checks its structure and every checksum; throws std::runtime_error saying
// what is wrong and at which byte offset.
Archive read_archive(const std::filesystem::path& src);

}  // namespace mlajit::cli

// A kernel spec: family, target arch and the integer parameters that specialize the template. It renders
// as `constexpr int MJ_<NAME> = <value>;` lines ahead of the template; the launch code reads the same
// struct, so kernel and launcher cannot disagree. The struct is small and trivially comparable: it is the
// in-memory cache key (no string formatting or hashing of source on the hot path).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mlajit {

enum class Family : uint8_t {
    mha_fwd = 0, sparse_mqa_fwd = 1, topk_mask = 2, mha_fwd_sm90 = 3, paged_gather = 4, sparse_mqa_fwd_sm90 = 5,
    quantize_cache = 6, gemm_sm90 = 7, sparse_mqa_fwd_sm90t = 8, sparse_mqa_compact = 9
};
inline constexpr int kNumFamilies = 10;

struct Arch {
    int sm = 0;        // 80, 86, 89, 90, 100, ...
    char suffix = 0;   // 'a' (arch-specific, e.g. sm_90a), 'f', or 0
    std::string name() const;  // "sm_90a"
    bool operator==(const Arch&) const = default;
    // Throws Error(INVALID_ARGUMENT) on a malformed name.
    static Arch parse(const std::string& name);
    // The arch mlajit compiles for on a device of this compute capability: sm_90a on Hopper (wgmma tier).
    static Arch for_compute_capability(int major, int minor);
};

inline constexpr int kMaxSpecParams = 10;

struct KernelSpec {
    Family family = Family::mha_fwd;
    Arch arch;
    std::array<int32_t, kMaxSpecParams> p{};  // meaning per family: FamilyInfo::params
    bool operator==(const KernelSpec&) const = default;
};

struct FamilyInfo {
    Family family;
    const char* name;           // "mha_fwd": cache folder and log name
    const char* template_file;  // "mha_fwd.cuh"
    const char* entry;          // "mlajit_mha_fwd": extern "C" kernel symbol
    std::vector<const char*> params;  // names, rendered as MJ_<name>
};
const FamilyInfo& family_info(Family f);
Family family_from_name(const std::string& name);  // throws on an unknown name

// "constexpr int MJ_BLOCK_M = 128;\n..." plus MJ_ARCH, then the template include.
std::string render_source(const KernelSpec& spec);
// "mha_fwd[BLOCK_M=128,BLOCK_N=64,...]@sm_90a": for logs, errors and metadata.
std::string spec_name(const KernelSpec& spec);

struct KernelSpecHash {
    size_t operator()(const KernelSpec& s) const noexcept {
        uint64_t h = 1469598103934665603ull ^ (uint64_t)s.family ^ ((uint64_t)s.arch.sm << 8) ^ ((uint64_t)s.arch.suffix << 24);
        for (int32_t v : s.p) h = (h ^ (uint32_t)v) * 1099511628211ull;
        return (size_t)h;
    }
};

}  // namespace mlajit

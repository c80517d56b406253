#include "archive.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "jit/disk_cache.h"

namespace mlajit::cli {

namespace {

constexpr char kMagic[8] = {'M', 'L', 'A', 'J', 'I', 'T', 'A', 'R'};
constexpr char kEndMagic[8] = {'M', 'L', 'A', 'J', 'E', 'N', 'D', '\0'};
constexpr size_t kHeaderBytes = 24, kRecordHeaderBytes = 32, kTrailerBytes = 16;

void put_u32(std::string& out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const char* p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
    return v;
}

std::string sys_error(int e) { return std::error_code(e, std::generic_category()).message(); }

void write_all(int fd, const char* data, size_t n, const std::filesystem::path& path) {
    while (n) {
        ssize_t w = ::write(fd, data, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) throw std::runtime_error(fmt::format("cannot write {}: {}", path.string(), sys_error(errno)));
        data += w;
        n -= size_t(w);
    }
}

// Reads an archive held in memory; every read is bounds-checked, so a damaged file is an error, not a crash.
class Reader {
public:
    Reader(const std::vector<char>& bytes, const std::filesystem::path& path) : b_(bytes), path_(path) {}
    const char* take(size_t n, const char* what) {
        if (b_.size() - pos_ < n)
            fail(fmt::format("the file ends inside {} (needs {} more bytes, {} left): it is truncated; copy it again",
                             what, n, b_.size() - pos_));
        const char* p = b_.data() + pos_;
        pos_ += n;
        return p;
    }
    size_t pos() const { return pos_; }
    bool at_end() const { return pos_ == b_.size(); }
    [[noreturn]] void fail(const std::string& what) const {
        throw std::runtime_error(fmt::format("{} is not a valid mlajit cache archive (at byte {}): {}", path_.string(),
                                             pos_, what));
    }

private:
    const std::vector<char>& b_;
    const std::filesystem::path& path_;
    size_t pos_ = 0;
};

}  // namespace

void write_archive(const std::filesystem::path& dest, const Archive& archive) {
    std::string head;
    head.append(kMagic, 8);
    put_u32(head, kArchiveVersion);
    put_u32(head, archive.cache_format);
    put_u64(head, archive.files.size());

    const std::filesystem::path tmp = dest.string() + fmt::format(".tmp.{}", ::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        throw std::runtime_error(fmt::format("cannot create {}: {}; choose a writable output path with -o",
                                             tmp.string(), sys_error(errno)));
    try {
        write_all(fd, head.data(), head.size(), tmp);
        for (const auto& f : archive.files) {
            if (f.path.empty() || f.path.size() > kMaxPathBytes || f.data.size() > kMaxFileBytes)
                throw std::runtime_error(fmt::format("cannot archive '{}': path or size out of range", f.path));
            std::string rec;
            put_u32(rec, uint32_t(f.path.size()));
            put_u32(rec, 0);
            put_u64(rec, f.data.size());
            CacheKey sum = xxh3_128(f.data);
            put_u64(rec, sum.hi);
            put_u64(rec, sum.lo);
            rec += f.path;
            write_all(fd, rec.data(), rec.size(), tmp);
            write_all(fd, f.data.data(), f.data.size(), tmp);
        }
        std::string tail(kEndMagic, 8);
        put_u64(tail, archive.files.size());
        write_all(fd, tail.data(), tail.size(), tmp);
        // A crash between rename and writeback must not leave a hollow archive under the final name.
        if (::fsync(fd) != 0) throw std::runtime_error(fmt::format("cannot fsync {}: {}", tmp.string(), sys_error(errno)));
        if (::close(std::exchange(fd, -1)) != 0)
            throw std::runtime_error(fmt::format("cannot close {}: {}", tmp.string(), sys_error(errno)));
        if (::rename(tmp.c_str(), dest.c_str()) != 0)
            throw std::runtime_error(fmt::format("cannot rename {} to {}: {}", tmp.string(), dest.string(), sys_error(errno)));
    } catch (...) {
        if (fd >= 0) ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
}

Archive read_archive(const std::filesystem::path& src) {
    std::ifstream in(src, std::ios::binary);
    if (!in)
        throw std::runtime_error(fmt::format("cannot open {}: {}; give the path of a file written by "
                                             "'mlajit-warmup export'",
                                             src.string(), sys_error(errno)));
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw std::runtime_error(fmt::format("cannot read {}", src.string()));

    Reader r(bytes, src);
    Archive a;
    const char* h = r.take(kHeaderBytes, "the header");
    if (std::memcmp(h, kMagic, 8) != 0) r.fail("it does not start with MLAJITAR (was it written by mlajit-warmup export?)");
    uint32_t version = uint32_t(get_le(h + 8, 4));
    if (version != kArchiveVersion)
        r.fail(fmt::format("archive format version {}, this mlajit-warmup reads version {}: import it with the "
                           "mlajit-warmup that matches the exporting one",
                           version, kArchiveVersion));
    a.cache_format = uint32_t(get_le(h + 12, 4));
    const uint64_t count = get_le(h + 16, 8);
    // Each record takes at least its header: a larger count is damage, not a reason to reserve memory.
    if (count > bytes.size() / kRecordHeaderBytes) r.fail(fmt::format("the header claims {} files", count));
    a.files.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
        const char* rh = r.take(kRecordHeaderBytes, fmt::format("the header of file record {}", i).c_str());
        const uint64_t plen = get_le(rh, 4), size = get_le(rh + 8, 8);
        const CacheKey sum{get_le(rh + 16, 8), get_le(rh + 24, 8)};
        if (plen == 0 || plen > kMaxPathBytes || get_le(rh + 4, 4) != 0 || size > kMaxFileBytes)
            r.fail(fmt::format("file record {} has a malformed header (path length {}, size {})", i, plen, size));
        ArchiveFile f;
        f.path.assign(r.take(plen, "a file path"), plen);
        const char* data = r.take(size, ("the data of " + f.path).c_str());
        f.data.assign(data, data + size);
        if (!(xxh3_128(f.data) == sum))
            r.fail(fmt::format("the data of {} does not match its checksum: the archive is damaged; export it again",
                               f.path));
        a.files.push_back(std::move(f));
    }
    const char* t = r.take(kTrailerBytes, "the trailer");
    if (std::memcmp(t, kEndMagic, 8) != 0 || get_le(t + 8, 8) != count)
        r.fail("the trailer is missing or does not match the header");
    if (!r.at_end()) r.fail("there are bytes after the trailer");
    return a;
}

}  // namespace mlajit::cli

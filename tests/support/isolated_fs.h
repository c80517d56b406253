// Runs a test body in a forked child that has a small file system of its own, so that faults a test cannot
// make with ordinary files happen for real: a full disk (ENOSPC), no inodes left, a read-only mount (EROFS,
// which stops root too, unlike chmod). The mount lives in the child's private mount namespace and vanishes
// with it; nothing leaks to the host.
//
// How the file system is made, best first (the figure says which one ran):
//   tmpfs         unshare(CLONE_NEWNS) + mount tmpfs: needs CAP_SYS_ADMIN (root in a container)
//   tmpfs_userns  unshare(CLONE_NEWUSER | CLONE_NEWNS) first: unprivileged, where user namespaces are enabled
//   none          neither works: the body gets a plain directory and must use a fallback (RLIMIT_FSIZE);
//                 MLAJIT_TEST_NO_MOUNT=1 forces this, to test the fallbacks
//
// The child reports through a file: lines starting "FAIL " are failures, "FIG " are figures. The parent
// kills a child that runs past its deadline and reports that as a failure (a hang must not stall CI).
#pragma once
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace mlajit::test {

enum class FsKind { tmpfs, tmpfs_userns, none };

inline const char* fs_kind_name(FsKind k) {
    switch (k) {
        case FsKind::tmpfs: return "tmpfs (mount namespace)";
        case FsKind::tmpfs_userns: return "tmpfs (user + mount namespace)";
        case FsKind::none: return "plain directory (no mount possible)";
    }
    return "?";
}

// What the body writes; the parent reads it back.
struct ChildReport {
    std::ostringstream text;
    void fail(const std::string& what) { text << "FAIL " << what << "\n"; }
    void figure(const std::string& what) { text << "FIG " << what << "\n"; }
    void check(bool ok, const std::string& what) {
        if (!ok) fail(what);
    }
};

struct ChildOutcome {
    bool exited_cleanly = false;  // exit code 0, no signal, no timeout
    std::string description;      // how it ended, when it did not end cleanly
    std::vector<std::string> failures, figures;
};

struct IsolatedFsOptions {
    uint64_t size_bytes = 4u << 20;
    uint64_t max_inodes = 0;  // 0: tmpfs's default
    std::chrono::seconds timeout{60};
};

namespace detail {

inline bool write_file(const char* path, const std::string& s) {
    int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = ::write(fd, s.data(), s.size()) == ssize_t(s.size());
    ::close(fd);
    return ok;
}

// In the (single-threaded) child: a private mount namespace with a tmpfs at `dir`.
inline FsKind mount_private_tmpfs(const std::filesystem::path& dir, const IsolatedFsOptions& o) {
    FsKind kind = FsKind::tmpfs;
    if (::unshare(CLONE_NEWNS) != 0) {
        const uid_t uid = ::getuid();
        const gid_t gid = ::getgid();
        if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return FsKind::none;
        write_file("/proc/self/setgroups", "deny");
        if (!write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
            !write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"))
            return FsKind::none;
        kind = FsKind::tmpfs_userns;
    }
    // Private, so that the mount below is not propagated back to the host's namespace.
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return FsKind::none;
    std::string opts = "size=" + std::to_string(o.size_bytes) + ",mode=0755";
    if (o.max_inodes) opts += ",nr_inodes=" + std::to_string(o.max_inodes);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) return FsKind::none;
    return kind;
}

// Whether mount_private_tmpfs works here, found in a throwaway process: a failed attempt can leave the
// caller inside a user namespace that maps no ids (where it could not even create files), so the real
// child tries only what the probe saw succeed.
inline FsKind probe(const std::filesystem::path& dir, const IsolatedFsOptions& o) {
    if (const char* v = std::getenv("MLAJIT_TEST_NO_MOUNT"); v && *v == '1') return FsKind::none;  // test the fallbacks
    pid_t pid = ::fork();
    if (pid < 0) return FsKind::none;
    if (pid == 0) ::_exit(int(mount_private_tmpfs(dir, o)));
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return FsKind::none;
    return FsKind(WEXITSTATUS(status));
}

}  // namespace detail

// Makes the child's tmpfs read-only (EROFS from then on). False when the mount is not one of ours.
inline bool remount_readonly(const std::filesystem::path& dir) {
    return ::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) == 0;
}

// Runs body(dir, kind, report) in a forked child with a fresh file system at `dir` (an existing, empty
// directory of the parent's). The body must not use doctest macros (they would report in the child).
inline ChildOutcome run_with_isolated_fs(const std::filesystem::path& dir, const std::filesystem::path& report_file,
                                         const IsolatedFsOptions& opt,
                                         const std::function<void(const std::filesystem::path&, FsKind, ChildReport&)>& body) {
    std::fflush(stdout);
    std::fflush(stderr);
    ChildOutcome out;
    pid_t pid = ::fork();
    if (pid < 0) {
        out.description = "fork failed";
        return out;
    }
    if (pid == 0) {
        int code = 0;
        try {
            FsKind kind = detail::probe(dir, opt) == FsKind::none ? FsKind::none : detail::mount_private_tmpfs(dir, opt);
            ChildReport r;
            body(dir, kind, r);
            std::ofstream(report_file) << r.text.str();
        } catch (const std::exception& e) {
            std::ofstream(report_file, std::ios::app) << "FAIL exception in the child: " << e.what() << "\n";
            code = 3;
        } catch (...) {
            code = 4;
        }
        ::_exit(code);  // no doctest teardown, no static destructors in the child
    }
    const auto deadline = std::chrono::steady_clock::now() + opt.timeout;
    int status = 0;
    for (;;) {
        pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            out.description = "the child hung (killed after " + std::to_string(opt.timeout.count()) + " s)";
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (out.description.empty()) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) out.exited_cleanly = true;
        else if (WIFEXITED(status)) out.description = "the child exited with code " + std::to_string(WEXITSTATUS(status));
        else if (WIFSIGNALED(status)) out.description = "the child died of signal " + std::to_string(WTERMSIG(status));
    }
    std::ifstream in(report_file);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("FAIL ", 0) == 0) out.failures.push_back(line.substr(5));
        else if (line.rfind("FIG ", 0) == 0) out.figures.push_back(line.substr(4));
    }
    return out;
}

}  // namespace mlajit::test

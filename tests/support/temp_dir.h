// A fresh directory under the system temp dir for one test, removed with its contents at scope exit.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

namespace mlajit::test {

class TempDir {
public:
    explicit TempDir(const std::string& tag = "test") {
        std::random_device rd;
        path = std::filesystem::temp_directory_path() /
               ("mlajit-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd()) + std::to_string(rd()));
        std::filesystem::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string str() const { return path.string(); }

    std::filesystem::path path;
};

}  // namespace mlajit::test

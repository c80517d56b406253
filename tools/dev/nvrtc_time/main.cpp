// mlajit-nvrtc-time: the cost of a cold NVRTC compile of each kernel variant a model needs, measured through
// the library's own path (prepare_kernel + compile_kernel: the same source, headers and options as a cache
// miss; the disk cache is never read or written). For each variant it compiles --reps times and prints the
// minimum and median of the wall time and of the process CPU time (getrusage: the machine is shared, so
// the CPU time is the number to compare), the load average, and with --phases NVRTC's own split
// (`--time`: CUDA C++ front end, NVVM optimizer = source -> PTX, PTX translation = ptxas inside NVRTC).
//
//   mlajit-nvrtc-time [--arch sm_90a] [--model deepseek-v3.2] [--tp 1,2,4,8] [--filter mha_fwd_sm90] [--reps 5]
//                     [--phases] [--flag -X ...] [--drop -lineinfo ...] [--cubin-dir DIR]
//
// --flag adds an NVRTC option (as MLAJIT_NVRTC_FLAGS would), --drop removes one of the canonical options,
// so an option's cost and its effect on the code can be measured without editing the library
// (--cubin-dir writes each variant's cubin for tools/dev/sass_snapshot.sh --cubins). The first compile of
// the process also pays NVRTC's one-time start (loading libnvrtc-builtins): it is timed once on its own,
// on a tiny kernel, before the variants, and printed.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "jit/compiler.h"
#include "jit/kernel_sources.h"
#include "jit/nvrtc_api.h"
#include "ops/kernel_configs.h"
#include "ops/variants.h"

using namespace mlajit;

namespace {

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double load1() {
    double l[1] = {0};
    return getloadavg(l, 1) == 1 ? l[0] : -1;
}

struct Sample {
    double wall = 0, cpu = 0;
    double front = -1, nvvm = -1, ptxas = -1;  // ms, from NVRTC's --time file
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double minimum(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

// NVRTC's --time file: "File name, phase name, metric, unit" then one row per phase.
void read_phases(const std::string& path, Sample& s) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
        std::vector<std::string> f;
        std::stringstream ss(line);
        for (std::string x; std::getline(ss, x, ',');) f.push_back(x.substr(x.find_first_not_of(' ')));
        if (f.size() < 3) continue;
        const double ms = std::atof(f[2].c_str());
        if (f[1] == "CUDA C++ Frontend") s.front = ms;
        else if (f[1] == "NVVM Optimizer") s.nvvm = ms;
        else if (f[1] == "PTX Translation") s.ptxas = ms;
    }
    std::filesystem::remove(path);
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string x; std::getline(ss, x, sep);)
        if (!x.empty()) out.push_back(x);
    return out;
}

int usage() {
    std::cerr << "usage: mlajit-nvrtc-time [--arch sm_90a] [--model NAME] [--tp 1,2,4,8] [--filter SUBSTR]... [--reps N]\n"
                 "                         [--phases] [--flag OPT]... [--drop OPT]... [--cubin-dir DIR] [--list]\n";
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::string arch_name = "sm_90a", model_name = "deepseek-v3.2", cubin_dir;
    std::vector<int> tp = {1, 2, 4, 8};
    std::vector<std::string> filters, add, drop;
    int reps = 3;
    bool phases = false, list = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::cerr << a << " needs a value\n";
                std::exit(usage());
            }
            return argv[++i];
        };
        if (a == "--arch") arch_name = next();
        else if (a == "--model") model_name = next();
        else if (a == "--tp") {
            tp.clear();
            for (auto& t : split(next(), ',')) tp.push_back(std::atoi(t.c_str()));
        } else if (a == "--filter") filters.push_back(next());
        else if (a == "--reps") reps = std::max(1, std::atoi(next().c_str()));
        else if (a == "--phases") phases = true;
        else if (a == "--flag") add.push_back(next());
        else if (a == "--drop") drop.push_back(next());
        else if (a == "--cubin-dir") cubin_dir = next();
        else if (a == "--list") list = true;
        else return usage();
    }
    try {
        const Arch arch = Arch::parse(arch_name);
        std::vector<KernelSpec> specs;
        for (const KernelSpec& s : model_variants(model_preset(model_name), tp, {arch})) {
            const std::string n = spec_name(s);
            bool keep = filters.empty();
            for (auto& f : filters) keep = keep || n.find(f) != std::string::npos;
            if (keep) specs.push_back(s);
        }
        if (list) {
            for (auto& s : specs) std::cout << spec_name(s) << "\n";
            return 0;
        }
        const NvrtcApi& nv = nvrtc();
        std::string opts_note;
        for (auto& f : add) opts_note += " +" + f;
        for (auto& f : drop) opts_note += " -(" + f + ")";
        std::cout << fmt::format("NVRTC {}.{} ({}), {} variants for {}, {} reps each, options: canonical{}\n", nv.major,
                                 nv.minor, nv.library_path, specs.size(), arch.name(), reps, opts_note);

        // NVRTC's one-time start, on its own: a one-line kernel.
        {
            KernelSpec tiny = topk_mask_spec(arch);
            PreparedKernel k = prepare_kernel(tiny, kernel_files(), {}, nv.major, nv.minor);
            k.source = "extern \"C\" __global__ void mj_nvrtc_time_tiny(int* p) { *p = 1; }\n";
            k.headers.clear();
            const double c0 = cpu_seconds();
            auto t0 = std::chrono::steady_clock::now();
            compile_kernel(k);
            const double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::cout << fmt::format("first compile of the process (tiny kernel, NVRTC start included): wall {:.3f} s, "
                                     "cpu {:.3f} s\n", w, cpu_seconds() - c0);
        }
        if (!cubin_dir.empty()) std::filesystem::create_directories(cubin_dir);

        std::cout << fmt::format("{:<72} {:>15} {:>15} {:>6}{}\n", "variant", "wall min/med s", "cpu min/med s", "load",
                                 phases ? "   front / nvvm / ptxas ms (median)" : "");
        const std::string time_file = fmt::format("/tmp/mlajit_nvrtc_time_{}.csv", getpid());
        for (const KernelSpec& s : specs) {
            std::vector<std::string> extra = add;
            if (phases) extra.push_back("--time=" + time_file);
            PreparedKernel k = prepare_kernel(s, kernel_files(), extra, nv.major, nv.minor);
            for (auto& d : drop) k.options.erase(std::remove(k.options.begin(), k.options.end(), d), k.options.end());
            std::vector<double> wall, cpu, fr, nvvm, px;
            const double l0 = load1();
            CompileOutput last;
            for (int r = 0; r < reps; ++r) {
                Sample smp;
                const double c0 = cpu_seconds();
                auto t0 = std::chrono::steady_clock::now();
                last = compile_kernel(k);
                smp.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                smp.cpu = cpu_seconds() - c0;
                if (phases) read_phases(time_file, smp);
                wall.push_back(smp.wall);
                cpu.push_back(smp.cpu);
                fr.push_back(smp.front);
                nvvm.push_back(smp.nvvm);
                px.push_back(smp.ptxas);
            }
            const double l1 = load1();
            std::cout << fmt::format("{:<72} {:>6.3f}/{:<7.3f} {:>6.3f}/{:<7.3f} {:>6.2f}", spec_name(s), minimum(wall),
                                     median(wall), minimum(cpu), median(cpu), std::max(l0, l1));
            if (phases) std::cout << fmt::format("   {:.0f} / {:.0f} / {:.0f}", median(fr), median(nvvm), median(px));
            std::cout << fmt::format("   cubin {} B\n", last.cubin.size());
            std::cout.flush();
            if (!cubin_dir.empty()) {
                std::string file = spec_name(s);
                for (char& c : file)
                    if (!std::isalnum((unsigned char)c) && c != '_' && c != '-') c = '_';
                std::ofstream(std::filesystem::path(cubin_dir) / (file + ".cubin"), std::ios::binary)
                    .write(last.cubin.data(), std::streamsize(last.cubin.size()));
            }
        }
    } catch (const std::exception& e) {
        std::cerr << "mlajit-nvrtc-time: " << e.what() << "\n";
        return 1;
    }
    return 0;
}

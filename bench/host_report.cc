#include "bench/host_report.h"

#include <ATen/ATen.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/bench_clock.h"
#include "common/model/huge_page_arena.h"

namespace pdserve::bench {

double CurrentRssMb() {
  std::ifstream f("/proc/self/statm");
  long long size = 0, resident = 0;
  f >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

// Resets the kernel's peak-RSS mark (VmHWM, which getrusage reports) to the
// current RSS. Linux >= 4.0; returns false where /proc/self/clear_refs is not
// writable.
bool ResetPeakRss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

// Shared objects mapped into this process whose path mentions one of `keys`.
std::vector<std::string> MappedLibraries(const std::vector<std::string>& keys) {
  std::ifstream f("/proc/self/maps");
  std::set<std::string> found;
  std::string line;
  while (std::getline(f, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    std::string lower = path;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    const std::string base = lower.substr(lower.rfind('/') + 1);
    for (const std::string& k : keys) {
      if (base.find(k) != std::string::npos) found.insert(path);
    }
  }
  return {found.begin(), found.end()};
}

std::string CpuFlags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model;
  std::set<std::string> have;
  const std::vector<std::string> want = {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni"};
  while (std::getline(f, line)) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0) {
      std::istringstream ss(line.substr(line.find(':') + 1));
      std::string w;
      while (ss >> w) {
        if (std::find(want.begin(), want.end(), w) != want.end()) have.insert(w);
      }
      break;
    }
  }
  std::vector<std::string> missing;
  for (const std::string& w : want) {
    if (!have.count(w)) missing.push_back(w);
  }
  return absl::StrCat(model, "; has {", absl::StrJoin(have, ","), "}; lacks {", absl::StrJoin(missing, ","), "}");
}

// Best GB/s (1e9 B/s) over `reps` sums of a `gib`-GiB fp32 buffer with the
// current intra-op thread count.
double MeasureReadBandwidth(double gib, int reps, double* checksum) {
  const int64_t n = static_cast<int64_t>(gib * 1024.0 * 1024.0 * 1024.0 / 4.0);
  // On 2 MiB pages as the weights are (huge_page_arena.h); the copy of an
  // untouched buffer reads the zero page, so only the copy is resident.
  pdserve::HugePageArena arena;
  at::Tensor buf = pdserve::PlaceOnHugePages(&arena, at::empty({n}, at::kFloat));
  buf.fill_(1.0f);  // touch every page before timing
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    *checksum += buf.sum().item<double>();
    const double s = MsSince(t0) / 1000.0;
    best = std::max(best, static_cast<double>(n) * 4.0 / s / 1e9);
  }
  return best;
}

// The BLAS and other math libraries mapped into the process.
void PrintMappedBlas() {
  const auto blas = MappedLibraries({"blas"});
  std::string kind = "none found";
  for (const std::string& p : blas) {
    std::string lower = p;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    // openblas-*/libblas.so.3 is OpenBLAS; blas/libblas.so.3 is the reference netlib build.
    if (lower.find("openblas") != std::string::npos) {
      kind = "OpenBLAS";
    } else if (kind != "OpenBLAS" && lower.find("mkl") != std::string::npos) {
      kind = "MKL";
    } else if (kind == "none found") {
      kind = "reference netlib BLAS";
    }
  }
  std::printf("BLAS loaded (/proc/self/maps): %s: %s\n", kind.c_str(), absl::StrJoin(blas, ", ").c_str());
  std::printf("other math libs loaded: %s\n",
              absl::StrJoin(MappedLibraries({"lapack", "dnnl", "mkl", "gomp", "iomp"}), ", ").c_str());
}

// at::show_config(): all of it, or the lines that say which BLAS/LAPACK/oneDNN
// the build uses.
void PrintShowConfig(bool full) {
  const std::string cfg = at::show_config();
  if (full) {
    std::printf("at::show_config():\n%s\n", cfg.c_str());
    return;
  }
  std::istringstream ss(cfg);
  std::string line;
  std::printf("at::show_config() (excerpt; --show-config for all):\n");
  while (std::getline(ss, line)) {
    if (line.find("BLAS") != std::string::npos || line.find("LAPACK") != std::string::npos ||
        line.find("MKL") != std::string::npos || line.find("OpenMP") != std::string::npos ||
        line.find("CPU capability") != std::string::npos) {
      std::printf("%s\n", line.substr(0, std::min<size_t>(line.size(), 160)).c_str());
    }
  }
}

}  // namespace pdserve::bench

#include "common/util/cpu_features.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define PDSERVE_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace pdserve {
namespace {

#ifdef PDSERVE_X86
// XCR0: the register states the OS saves on a context switch.
unsigned long long Xcr0() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

// Linux: AMX tile data is off until the process asks (kernel >= 5.16).
bool AmxPermitted() {
#if defined(__linux__)
  constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  unsigned long bitmask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) == 0 && (bitmask & (1ul << kXfeatureXtiledata))) {
    return true;
  }
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return true;
#endif
}

// The CPU family of an AMD CPU (base + extended family) from cpuid leaf 1's
// eax, 0 for other vendors.
unsigned AmdFamily(unsigned leaf1_eax) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
  const bool amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "Auth" "enti" "cAMD"
  if (!amd) return 0;
  const unsigned base = (leaf1_eax >> 8) & 0xf;
  return base == 0xf ? base + ((leaf1_eax >> 20) & 0xff) : base;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const unsigned leaf1_eax = a;
  f.sse42 = c & (1u << 20);
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), avx = c & (1u << 28);
  const unsigned long long xcr0 = osxsave ? Xcr0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;
  const bool os_tile = (xcr0 & 0x60000) == 0x60000;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = avx && os_ymm && (b & (1u << 5));
  f.fma = fma && os_ymm;
  f.avx512f = os_zmm && (b & (1u << 16));
  f.avx512bw = os_zmm && (b & (1u << 30));
  f.avx512vl = os_zmm && (b & (1u << 31));
  f.avx512_vnni = os_zmm && (c & (1u << 11));
  const bool tile = d & (1u << 24), amx_bf16 = d & (1u << 22);
  f.avx512_half_width = f.avx512f && AmdFamily(leaf1_eax) == 0x19;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = f.avx512f && (a1 & (1u << 5));
  if (tile && os_tile && AmxPermitted()) {
    f.amx_tile = true;
    f.amx_bf16 = amx_bf16;
  }
  return f;
}
#else
CpuFeatures Detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& HostCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

std::string CpuFeaturesString(const CpuFeatures& f) {
  std::vector<const char*> names;
  const std::pair<bool, const char*> all[] = {{f.sse42, "sse42"},       {f.avx2, "avx2"},
                                              {f.fma, "fma"},           {f.avx512f, "avx512f"},
                                              {f.avx512bw, "avx512bw"}, {f.avx512vl, "avx512vl"},
                                              {f.avx512_bf16, "avx512_bf16"},
                                              {f.avx512_vnni, "avx512_vnni"},
                                              {f.avx512_half_width, "avx512_half_width"},
                                              {f.amx_tile, "amx_tile"}, {f.amx_bf16, "amx_bf16"}};
  for (const auto& [has, name] : all) {
    if (has) names.push_back(name);
  }
  return names.empty() ? "none" : absl::StrJoin(names, " ");
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
    default: return "avx2";
  }
}

absl::StatusOr<Isa> ParseIsa(const std::string& name) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (name == IsaName(isa)) return isa;
  }
  return absl::InvalidArgumentError(absl::StrCat("ISA must be avx2, avx512 or amx, got '", name, "'"));
}

bool IsaSupported(const CpuFeatures& f, Isa isa) {
  const bool avx2 = f.avx2 && f.fma;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl;
  switch (isa) {
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512: return avx512;
    case Isa::kAmx: return avx512 && f.avx512_bf16 && f.amx_tile && f.amx_bf16;
  }
  return false;
}

Isa BestIsa(const CpuFeatures& f) {
  if (IsaSupported(f, Isa::kAmx)) return Isa::kAmx;
  if (IsaSupported(f, Isa::kAvx512)) return Isa::kAvx512;
  return Isa::kAvx2;
}

absl::StatusOr<Isa> SelectIsa(const CpuFeatures& f, const char* forced) {
  if (forced == nullptr || forced[0] == '\0') return BestIsa(f);
  auto isa = ParseIsa(forced);
  if (!isa.ok()) return absl::InvalidArgumentError(absl::StrCat(kIsaEnv, "=", forced, ": ", isa.status().message()));
  if (!IsaSupported(f, *isa)) {
    return absl::FailedPreconditionError(
        absl::StrCat(kIsaEnv, "=", forced, ": this CPU (or OS) cannot run the ", IsaName(*isa),
                     " path; it has: ", CpuFeaturesString(f), " (", IsaName(*isa),
                     " needs avx2 fma", *isa == Isa::kAvx2 ? "" : " avx512f avx512bw avx512vl",
                     *isa == Isa::kAmx ? " avx512_bf16 amx_tile amx_bf16 with the OS's tile-data permission" : "",
                     ")"));
  }
  return *isa;
}

absl::StatusOr<Isa> HostIsa() {
  static const absl::StatusOr<Isa> isa = SelectIsa(HostCpuFeatures(), std::getenv(kIsaEnv));
  return isa;
}

}  // namespace pdserve

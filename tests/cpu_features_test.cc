// CPU feature detection and the kernel-path choice (common/util/cpu_features.h).
#include "common/util/cpu_features.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace pdserve {
namespace {

CpuFeatures Avx2Only() {
  CpuFeatures f;
  f.avx2 = f.fma = true;
  return f;
}

CpuFeatures Avx512() {
  CpuFeatures f = Avx2Only();
  f.avx512f = f.avx512bw = f.avx512vl = true;
  return f;
}

CpuFeatures Amx() {
  CpuFeatures f = Avx512();
  f.avx512_bf16 = f.amx_tile = f.amx_bf16 = true;
  return f;
}

TEST(CpuFeaturesTest, ParseIsa) {
  EXPECT_EQ(*ParseIsa("avx2"), Isa::kAvx2);
  EXPECT_EQ(*ParseIsa("avx512"), Isa::kAvx512);
  EXPECT_EQ(*ParseIsa("amx"), Isa::kAmx);
  EXPECT_EQ(ParseIsa("sse").status().code(), absl::StatusCode::kInvalidArgument);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) EXPECT_EQ(*ParseIsa(IsaName(isa)), isa);
}

TEST(CpuFeaturesTest, BestIsaIsTheWidestSupported) {
  EXPECT_EQ(BestIsa(CpuFeatures{}), Isa::kAvx2);
  EXPECT_FALSE(IsaSupported(CpuFeatures{}, Isa::kAvx2));
  EXPECT_EQ(BestIsa(Avx2Only()), Isa::kAvx2);
  EXPECT_EQ(BestIsa(Avx512()), Isa::kAvx512);
  EXPECT_EQ(BestIsa(Amx()), Isa::kAmx);
  CpuFeatures no_permission = Amx();
  no_permission.amx_tile = no_permission.amx_bf16 = false;  // the OS refused tile data
  EXPECT_EQ(BestIsa(no_permission), Isa::kAvx512);
  CpuFeatures no_fma = Avx2Only();
  no_fma.fma = false;
  EXPECT_FALSE(IsaSupported(no_fma, Isa::kAvx2));
}

TEST(CpuFeaturesTest, ForcingAPathTheCpuLacksIsAClearError) {
  EXPECT_EQ(*SelectIsa(Amx(), nullptr), Isa::kAmx);
  EXPECT_EQ(*SelectIsa(Amx(), ""), Isa::kAmx);
  EXPECT_EQ(*SelectIsa(Amx(), "avx2"), Isa::kAvx2);  // a narrower path is always allowed
  auto amx = SelectIsa(Avx2Only(), "amx");
  ASSERT_EQ(amx.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(amx.status().message().find("PDSERVE_ISA=amx"), std::string::npos) << amx.status();
  EXPECT_NE(amx.status().message().find("it has: avx2 fma"), std::string::npos) << amx.status();
  EXPECT_NE(amx.status().message().find("amx_bf16"), std::string::npos) << amx.status();
  EXPECT_EQ(SelectIsa(Avx2Only(), "avx512").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SelectIsa(CpuFeatures{}, "avx2").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SelectIsa(Amx(), "avx1024").status().code(), absl::StatusCode::kInvalidArgument);
}

// The flags Linux reports in /proc/cpuinfo (what the kernel lets user space
// use), which detection must agree with.
std::set<std::string> ProcCpuFlags() {
  std::ifstream f("/proc/cpuinfo");
  std::set<std::string> flags;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) flags.insert(w);
    break;
  }
  return flags;
}

TEST(CpuFeaturesTest, HostDetectionAgreesWithTheKernel) {
  const std::set<std::string> flags = ProcCpuFlags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  const CpuFeatures& f = HostCpuFeatures();
  std::printf("host: %s; best path %s\n", CpuFeaturesString(f).c_str(), IsaName(BestIsa(f)));
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
  EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(f.avx512vl, flags.count("avx512vl") == 1);
  EXPECT_EQ(f.avx512_bf16, flags.count("avx512_bf16") == 1);
  EXPECT_EQ(f.avx512_vnni, flags.count("avx512_vnni") == 1);
  // AMX also needs the kernel's tile-data permission, which detection asks for.
  EXPECT_EQ(f.amx_tile, flags.count("amx_tile") == 1);
  EXPECT_EQ(f.amx_bf16, flags.count("amx_bf16") == 1);
  EXPECT_EQ(__builtin_cpu_supports("avx2") != 0, f.avx2);
  EXPECT_EQ(__builtin_cpu_supports("avx512f") != 0, f.avx512f);
  EXPECT_EQ(*SelectIsa(f, nullptr), BestIsa(f));
}

}  // namespace
}  // namespace pdserve

// CRC-32C: the published check values, and every path (portable tables,
// the three-stream SSE4.2 one) giving the same sums over any length,
// alignment and continuation.
#include "common/handoff/crc32c.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace pdserve {
namespace {

// The byte-at-a-time definition, as the reference.
uint32_t Reference(const uint8_t* p, size_t n, uint32_t crc = 0) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

using Fn = uint32_t (*)(const void*, size_t, uint32_t);

struct Path {
  const char* name;
  Fn fn;
  bool available;
};

void PrintTo(const Path& p, std::ostream* os) { *os << p.name; }

const Path kPaths[] = {{"Crc32c", &Crc32c, true},
                       {"portable", &Crc32cPortable, true},
                       {"hardware", &Crc32cHardware, Crc32cHardwareAvailable()}};

// The cases below run once per path (Path/Crc32cPathTest.*/Crc32c, .../Portable,
// .../Hardware); the hardware one skips, with GTEST_SKIP, on a CPU without SSE4.2.
class Crc32cPathTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    if (!GetParam().available) GTEST_SKIP() << "this CPU has no SSE4.2: the " << GetParam().name << " path cannot run";
  }
};

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Where the CPU has SSE4.2, the hardware path exists, gives the published
// check value, and is the one Crc32c takes; where it does not, the case
// skips (GTEST_SKIP; scripts/test_skips.sh allows it only where
// /proc/cpuinfo lacks sse4_2).
TEST(Crc32cTest, HardwarePathRunsAndIsTheDefault) {
  if (!Crc32cHardwareAvailable()) GTEST_SKIP() << "this CPU has no SSE4.2: only the portable path is tested";
  EXPECT_EQ(Crc32cHardware("123456789", 9, 0), 0xE3069283u);
  const std::vector<uint8_t> data = RandomBytes(3 * 4096 + 5, 17);
  EXPECT_EQ(Crc32cHardware(data.data(), data.size(), 0), Crc32cPortable(data.data(), data.size(), 0));
  EXPECT_EQ(Crc32c(data.data(), data.size(), 0), Crc32cHardware(data.data(), data.size(), 0));
}

// RFC 3720 (iSCSI) appendix B.4, and the common "123456789" check value.
TEST_P(Crc32cPathTest, PublishedCheckValues) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  const Path& p = GetParam();
  EXPECT_EQ(p.fn("123456789", 9, 0), 0xE3069283u);
  EXPECT_EQ(p.fn(zeros.data(), 32, 0), 0x8A9136AAu);
  EXPECT_EQ(p.fn(ones.data(), 32, 0), 0x62A8AB43u);
  EXPECT_EQ(p.fn(up.data(), 32, 0), 0x46DD794Eu);
  EXPECT_EQ(p.fn(down.data(), 32, 0), 0x113FDB5Cu);
  EXPECT_EQ(p.fn(nullptr, 0, 0), 0u);
  EXPECT_EQ(p.fn(nullptr, 0, 0x12345678u), 0x12345678u);
}

// Lengths around every boundary of the fast paths (8-byte words, the
// three-stream block of 3 x 4096 bytes), at every alignment mod 8.
TEST_P(Crc32cPathTest, MatchesTheDefinition) {
  const std::vector<uint8_t> data = RandomBytes(3 * 3 * 4096 + 64, 7);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 80; ++n) lengths.push_back(n);
  for (size_t base : {size_t{4096}, size_t{3 * 4096}, size_t{2 * 3 * 4096}, size_t{3 * 3 * 4096}}) {
    for (size_t d = 0; d <= 9; ++d) {
      lengths.push_back(base + d);
      lengths.push_back(base - d);
    }
  }
  const Path& p = GetParam();
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n : lengths) {
      if (offset + n > data.size()) continue;
      ASSERT_EQ(p.fn(data.data() + offset, n, 0), Reference(data.data() + offset, n))
          << p.name << ": offset " << offset << ", " << n << " bytes";
    }
  }
}

// A sum continued over pieces equals the sum of the whole, whatever the
// cut; and a megabyte with one bit flipped anywhere sums differently.
TEST_P(Crc32cPathTest, ContinuesAcrossPiecesAndSeesOneFlippedBit) {
  const std::vector<uint8_t> data = RandomBytes(1 << 20, 11);
  const uint32_t whole = Reference(data.data(), data.size());
  std::mt19937 rng(3);
  const Path& p = GetParam();
  EXPECT_EQ(p.fn(data.data(), data.size(), 0), whole);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t cut = rng() % data.size();
    EXPECT_EQ(p.fn(data.data() + cut, data.size() - cut, p.fn(data.data(), cut, 0)), whole) << "cut at " << cut;
  }
  std::vector<uint8_t> flipped = data;
  for (int trial = 0; trial < 20; ++trial) {
    const size_t byte = rng() % flipped.size();
    const uint8_t bit = static_cast<uint8_t>(1u << (rng() % 8));
    flipped[byte] ^= bit;
    EXPECT_NE(p.fn(flipped.data(), flipped.size(), 0), whole) << "bit flipped at byte " << byte;
    flipped[byte] ^= bit;
  }
}

INSTANTIATE_TEST_SUITE_P(Path, Crc32cPathTest, ::testing::ValuesIn(kPaths), [](const ::testing::TestParamInfo<Path>& info) {
  std::string name = info.param.name;
  name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
  return name;
});

}  // namespace
}  // namespace pdserve

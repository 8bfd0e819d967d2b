#include "common/handoff/crc32c.h"

#include <array>
#include <cstring>

#include "common/util/cpu_features.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#define PDSERVE_CRC32C_X86 1
#endif

// All paths update the bare register (no inversions); the public functions
// invert it on the way in and out, as the standard defines.
namespace pdserve {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

using Table = std::array<uint32_t, 256>;

// kSlices[0] is the byte-at-a-time table; kSlices[k][i] is byte i followed
// by k zero bytes.
constexpr std::array<Table, 8> MakeSlices() {
  std::array<Table, 8> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  }
  return t;
}
constexpr std::array<Table, 8> kSlices = MakeSlices();

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint32_t BytesPortable(uint32_t crc, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kSlices[0][(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

uint32_t RegisterPortable(uint32_t crc, const uint8_t* p, size_t n) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  for (; n >= 8; p += 8, n -= 8) {
    const uint32_t lo = crc ^ Load32(p), hi = Load32(p + 4);
    crc = kSlices[7][lo & 0xFF] ^ kSlices[6][(lo >> 8) & 0xFF] ^ kSlices[5][(lo >> 16) & 0xFF] ^
          kSlices[4][lo >> 24] ^ kSlices[3][hi & 0xFF] ^ kSlices[2][(hi >> 8) & 0xFF] ^
          kSlices[1][(hi >> 16) & 0xFF] ^ kSlices[0][hi >> 24];
  }
#endif
  return BytesPortable(crc, p, n);
}

#ifdef PDSERVE_CRC32C_X86
// The hardware path runs three streams over consecutive kStride-byte
// segments (the instruction's latency is three times its issue interval),
// then joins them: a register after segment A, continued over B, equals
// Shift(reg_A) ^ reg_B, where Shift appends kStride zero bytes (the map is
// linear over GF(2), so four 256-entry tables apply it a byte at a time).
constexpr size_t kStride = 4096;

struct ShiftTables {
  std::array<Table, 4> t;
  uint32_t Apply(uint32_t crc) const {
    return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^ t[3][crc >> 24];
  }
};

__attribute__((target("sse4.2"))) uint32_t ZerosHardware(uint32_t crc, size_t n) {
  uint64_t c = crc;
  for (size_t i = 0; i < n; i += 8) c = _mm_crc32_u64(c, 0);
  return static_cast<uint32_t>(c);
}

__attribute__((target("sse4.2"))) ShiftTables MakeShiftTables() {
  std::array<uint32_t, 32> basis{};  // Shift of each single-bit register
  for (int b = 0; b < 32; ++b) basis[b] = ZerosHardware(uint32_t{1} << b, kStride);
  ShiftTables s{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t v = 0;
      for (int j = 0; j < 8; ++j) {
        if (i & (1u << j)) v ^= basis[8 * k + j];
      }
      s.t[k][i] = v;
    }
  }
  return s;
}

__attribute__((target("sse4.2"))) uint32_t RegisterHardware(uint32_t crc, const uint8_t* p, size_t n) {
  static const ShiftTables shift = MakeShiftTables();
  uint64_t c0 = crc;
  for (; n >= 3 * kStride; p += 3 * kStride, n -= 3 * kStride) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < kStride; i += 8) {
      uint64_t a, b, d;
      std::memcpy(&a, p + i, 8);
      std::memcpy(&b, p + kStride + i, 8);
      std::memcpy(&d, p + 2 * kStride + i, 8);
      c0 = _mm_crc32_u64(c0, a);
      c1 = _mm_crc32_u64(c1, b);
      c2 = _mm_crc32_u64(c2, d);
    }
    c0 = shift.Apply(shift.Apply(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1)) ^ static_cast<uint32_t>(c2);
  }
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t a;
    std::memcpy(&a, p, 8);
    c0 = _mm_crc32_u64(c0, a);
  }
  uint32_t c = static_cast<uint32_t>(c0);
  for (; n > 0; ++p, --n) c = _mm_crc32_u8(c, *p);
  return c;
}
#endif

}  // namespace

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  return ~RegisterPortable(~crc, static_cast<const uint8_t*>(data), n);
}

bool Crc32cHardwareAvailable() {
#ifdef PDSERVE_CRC32C_X86
  return HostCpuFeatures().sse42;
#else
  return false;
#endif
}

uint32_t Crc32cHardware(const void* data, size_t n, uint32_t crc) {
#ifdef PDSERVE_CRC32C_X86
  return ~RegisterHardware(~crc, static_cast<const uint8_t*>(data), n);
#else
  return Crc32cPortable(data, n, crc);
#endif
}

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  static const bool hardware = Crc32cHardwareAvailable();
  return hardware ? Crc32cHardware(data, n, crc) : Crc32cPortable(data, n, crc);
}

}  // namespace pdserve

// CRC-32C (Castagnoli), the checksum of every KV hand-off chunk. The
// sender sums each chunk and the receiver checks it, so the sum runs over
// every hand-off byte twice, once on each side.
//   Crc32c                    on the fastest path this CPU has
//   Crc32cPortable            slicing-by-8 tables (any CPU; ~2 GB/s)
//   Crc32cHardware            the SSE4.2 crc32 instruction, three streams
//                             at once (~25 GB/s on a Zen 4 core); only where
//   Crc32cHardwareAvailable   says so
// Every path gives the same value (crc32c_test).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pdserve {

// CRC-32C of `n` bytes; pass a previous result as `crc` to continue it.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);

// True on x86-64 CPUs with SSE4.2.
bool Crc32cHardwareAvailable();
// Only where Crc32cHardwareAvailable() (SIGILL otherwise).
uint32_t Crc32cHardware(const void* data, size_t n, uint32_t crc = 0);

}  // namespace pdserve

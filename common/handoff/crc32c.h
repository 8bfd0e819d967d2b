// CRC-32C (Castagnoli), the checksum of every KV hand-off chunk.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pdserve {

// CRC-32C of `n` bytes; pass a previous result as `crc` to continue it.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace pdserve

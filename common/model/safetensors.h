// Safetensors reader (mmap) and writer. Knows bytes, dtypes and shapes only;
// no LibTorch, so it can be tested and reused cheaply.
//
// Format: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"},
// then the data section; offsets are relative to its start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve {

// kU8: raw bytes (gpt-oss's MXFP4 blocks and e8m0 scales).
enum class StDtype { kF32, kBF16, kF16, kU8, kOther };

// "F32", "BF16", "F16", "U8"; "other" for kOther.
const char* StDtypeName(StDtype dtype);
// 4, 2, 2, 1; 0 for kOther.
size_t StDtypeSize(StDtype dtype);

struct StTensorView {
  StDtype dtype = StDtype::kOther;
  std::string dtype_name;        // as written in the file
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapping
  size_t nbytes = 0;
  // Product of the dimensions; -1 when one is negative or it overflows int64
  // (Open rejects such tensors, so its views never give -1).
  int64_t numel() const;
};

// A read-only mapping of one safetensors file. Views stay valid for the
// lifetime of this object.
class SafetensorsFile {
 public:
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Maps and validates the header: its declared length against the file's
  // size (and 100 MiB), its JSON nesting (config.h's kMaxJsonDepth) before
  // parsing, every offset inside the file, every rank <= 8, every element
  // count and byte count computed with overflow checks and equal to
  // numel * element size. Nothing is allocated from a declared size. Returns NotFound for a missing file
  // and DataLoss naming the tensor for a truncated or corrupt one.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::map<std::string, StTensorView>& tensors() const { return tensors_; }
  // nullptr when absent.
  const StTensorView* Find(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  // Maps path_ read-only into map_: NotFound when it cannot be opened,
  // DataLoss when it is shorter than the 8-byte header length.
  absl::Status Map();
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, StTensorView> tensors_;
};

// One tensor to write; `data` must hold numel * StDtypeSize(dtype) bytes.
struct StTensorToWrite {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// Writes tensors in the given order (header sorted by name, as the Python
// writer does). Returns an InternalError naming the path on I/O failure.
absl::Status WriteSafetensors(const std::string& path, const std::vector<StTensorToWrite>& tensors);

}  // namespace pdserve

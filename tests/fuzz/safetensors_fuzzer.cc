// libFuzzer target: the safetensors header and tensor table
// (SafetensorsFile::Open on the input as a file).
//
// The input is written to a memfd and opened through /proc/self/fd, so the
// real mmap path runs. Properties: every accepted tensor lies inside the
// mapping, its byte count equals numel * element size without overflow,
// and every error is DataLoss (or NotFound/Internal for I/O) with a bounded
// message.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/model/safetensors.h"

namespace {

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "safetensors_fuzzer: %s: %.300s\n", what, detail.c_str());
  std::abort();
}

int MemFd() {
  static const int fd = memfd_create("safetensors_fuzz", MFD_CLOEXEC);
  if (fd < 0) Fail("memfd_create failed", "");
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = MemFd();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) Fail("memfd write", "");
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  absl::StatusOr<std::unique_ptr<pdserve::SafetensorsFile>> f = pdserve::SafetensorsFile::Open(path);
  if (!f.ok()) {
    if (f.status().code() != absl::StatusCode::kDataLoss && f.status().code() != absl::StatusCode::kInternal) {
      Fail("unexpected code", f.status().ToString());
    }
    if (f.status().message().size() > 600) Fail("unbounded error message", std::string(f.status().message()));
    return 0;
  }
  const uint8_t* begin = nullptr;
  uint64_t sum = 0;
  for (const auto& [name, v] : (*f)->tensors()) {
    const int64_t n = v.numel();
    if (n < 0) Fail("accepted tensor with overflowing numel", name);
    const size_t elem = pdserve::StDtypeSize(v.dtype);
    if (elem != 0 && v.nbytes != static_cast<uint64_t>(n) * elem) Fail("byte count mismatch", name);
    if (v.nbytes > size) Fail("tensor larger than the file", name);
    if (begin == nullptr || v.data < begin) begin = v.data;
    // Touch the first and last byte: outside the mapping this faults.
    if (v.nbytes > 0) sum += v.data[0] + v.data[v.nbytes - 1];
  }
  if (sum == 0xFFFFFFFFFFFFFFFFull) std::fprintf(stderr, "unreachable\n");
  return 0;
}

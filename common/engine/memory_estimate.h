// The engine's memory at load, estimated before any weight is read, against
// the container's memory limit:
//   MemoryEstimate / EstimateMemory  weights by dtype, run-time f32 copies of
//                                    bf16 weights (as the prefill GEMM path
//                                    makes them), the KV budget, workspace
//   MemoryLimit / ReadMemoryLimit    PDSERVE_MEMORY_LIMIT_BYTES, else cgroup
//                                    v2 memory.max, else v1 limit_in_bytes
//   CheckMemoryFits                  ResourceExhausted naming the numbers
//   DescribeMemory                   the one line the engine prints at load
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/checkpoint.h"
#include "common/model/config.h"

namespace pdserve {

enum class Bf16Matmul;  // common/kernels/bf16_matmul.h (kept out: it includes ATen)
enum class KvDtype;     // common/kv/mixed_kv_cache.h (the same)

struct MemoryEstimate {
  int64_t weights_f32_bytes = 0;   // tensors held in fp32
  int64_t weights_bf16_bytes = 0;  // matmul weights held in bf16
  int64_t weights_int8_bytes = 0;  // matmul weights held in Q8_0 rows (34 bytes per 32 values)
  // gpt-oss: the MXFP4 experts, and with bf16 weights the embedding, head,
  // q and o too, read from the checkpoint's read-only mapping (page cache,
  // shared by every process that maps the same files).
  int64_t weights_mapped_bytes = 0;
  // fp32 copies of bf16 or int8 weights made while running (the per-thread
  // widening buffer of Linear / LinearQ8 and the LM head's transient copy
  // in prefill); 0 in f32, with the amx path, with split for every shape
  // its kernel takes, and with int8 k-major packs.
  int64_t widened_f32_bytes = 0;
  // --f32-packed-weights: a second copy of each layer's fp32 matmul weights
  // in oneDNN's blocked layout (gemm_dnnl.h), rounded up to its blocks of
  // 64 outputs x 16 inputs; 0 otherwise.
  int64_t packed_f32_bytes = 0;
  // --bf16-matmul kmajor or dot with bf16 weights, or int8 weights where
  // Q8PacksKMajor() (linear_int8.h): the k-major pack of every matrix
  // decode reads (kmajor_packs.h), fused as the engine fuses them, rows
  // padded to groups of 32; 0 otherwise. The packs replace those matrices'
  // row-major copies, which weights_bf16_bytes / weights_int8_bytes then
  // leave out (unless KMajorKeepsRowMajor(), for benchmarks).
  int64_t kmajor_bytes = 0;
  int64_t kv_budget_bytes = 0;     // what the caller may reserve or hold for KV
  int64_t workspace_bytes = 0;     // one prefill chunk at max_context
  int64_t total() const {
    return weights_f32_bytes + weights_bf16_bytes + weights_int8_bytes + weights_mapped_bytes + widened_f32_bytes +
           packed_f32_bytes +
           kmajor_bytes + kv_budget_bytes + workspace_bytes;
  }
};

// From the config's tensor shapes (no file read). `kv_budget_bytes` is the
// KV the process may hold (the decode worker's --kv-budget-mb; 0 if none).
// The workspace is that of a prefill chunk ending at max_context, the
// longest prompt Engine accepts: a global layer's K/V in the fused prefill
// attention's fp32 layout, with one more copy of K while it is laid out
// (576 MiB for 4 KV heads of 96 at 131072 keys);
// on a CPU or shape that kernel does not take, the ATen form's scores for
// a block of 128 rows against all of it (512 MiB with 8 heads) and, with
// `kv_dtype` bf16, its K/V widened to fp32.
// `bf16_matmul` is the prefill path of bf16 weights (GetBf16Matmul()): only
// widen, and split for shapes its AMX kernel does not take, copy weights.
// `packed_f32` (PacksLayerWeights(weights_dtype)) counts the fp32 packs of
// the layers' matmul weights (fp32, or bf16 widened); the widening buffer is
// still counted, for shapes a pack does not serve.
MemoryEstimate EstimateMemory(const ModelConfig& config, WeightsDtype weights_dtype, KvDtype kv_dtype,
                              int64_t kv_budget_bytes, int64_t prefill_chunk, Bf16Matmul bf16_matmul,
                              bool packed_f32 = false);

struct MemoryLimit {
  int64_t bytes = -1;  // -1: no limit
  std::string source;  // where it came from, e.g. "/sys/fs/cgroup/memory.max"
};

// The environment variable that overrides the detected limit (a byte count,
// or "max" for none).
inline constexpr char kMemoryLimitEnv[] = "PDSERVE_MEMORY_LIMIT_BYTES";

// `env_value` (the override; null when unset) or else the first readable
// file of `cgroup_files` ("max", or a v1 value >= 2^60, means no limit).
// InvalidArgument for an override that is not a byte count or "max".
absl::StatusOr<MemoryLimit> ReadMemoryLimit(const char* env_value, const std::vector<std::string>& cgroup_files);

// ReadMemoryLimit with this process's environment and cgroup: its own v2
// cgroup's memory.max (from /proc/self/cgroup), /sys/fs/cgroup/memory.max,
// then v1's /sys/fs/cgroup/memory/memory.limit_in_bytes.
absl::StatusOr<MemoryLimit> ContainerMemoryLimit();

// OK without a limit or when the estimate fits; ResourceExhausted naming
// every part of the estimate and the limit otherwise.
absl::Status CheckMemoryFits(const MemoryEstimate& estimate, const MemoryLimit& limit);

// "memory estimate 2.1 GiB: weights 1.9 GiB f32 + 0 B bf16, ...; limit 8 GiB
// (/sys/fs/cgroup/memory.max)".
std::string DescribeMemory(const MemoryEstimate& estimate, const MemoryLimit& limit);

}  // namespace pdserve

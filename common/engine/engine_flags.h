// The engine flags, declared once for every binary that loads a model
// (--model, --weights-dtype, --kv-dtype, --threads, --prefill-chunk,
// --bf16-matmul, which sets the process-wide path of common/kernels/bf16_matmul.h,
// --q8-kernel, the process-wide int8 kernel of common/kernels/linear_int8.h,
// --f32-packed-weights, the process-wide PackF32Weights of gemm_dnnl.h):
//   EngineFlagsFromCommandLine  validates them into EngineOptions (no loading)
//   EngineOptionsFromCommandLine  the same, without --model
//   LoadEngineFromFlags         validates, loads the checkpoint, fingerprints
//                               it and runs a warmup generation, so that a
//                               server only listens once it can answer.
// Link pdserve_engine_flags; the FLAGS_* below are readable with
// absl::GetFlag where a binary needs one itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "common/engine/engine.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, weights_dtype);
ABSL_DECLARE_FLAG(std::string, kv_dtype);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(int64_t, prefill_chunk);
ABSL_DECLARE_FLAG(std::string, bf16_matmul);
ABSL_DECLARE_FLAG(std::string, q8_kernel);
ABSL_DECLARE_FLAG(bool, f32_packed_weights);

namespace pdserve {

struct EngineFlags {
  std::string model_dir;  // --model
  EngineOptions options;  // dtypes, threads, prefill chunk
};

// InvalidArgument naming the flag and its value: --model missing, an unknown
// dtype, --prefill-chunk < 1 or --threads < 0; FailedPrecondition for
// --bf16-matmul=amx or split on a CPU without AMX-BF16, dot without
// AVX512-BF16.
absl::StatusOr<EngineFlags> EngineFlagsFromCommandLine();

// The same without --model, for a binary that can also build a model some
// other way (pdserve-decode-bench --config): the dtypes, --prefill-chunk and
// --threads, with the same errors.
absl::StatusOr<EngineOptions> EngineOptionsFromCommandLine();

struct LoadedEngine {
  std::unique_ptr<Engine> engine;
  std::string fingerprint;  // ModelFingerprint of the weights
  std::string model_dir;
};

// EngineFlagsFromCommandLine, then loads the model and runs a one-token
// prefill plus one decode step. `kv_budget_bytes` (the KV the process may
// reserve), `held_kv_sequences` (max_context sequences it holds besides: a
// prefill worker's executors) and `held_kv_copy_bytes` (EngineOptions) are
// counted in the load-time memory check.
// InvalidArgument for bad flag values; the loader's errors (NotFound,
// DataLoss, ResourceExhausted when the estimate exceeds the memory limit,
// FailedPrecondition for a PDSERVE_ISA this CPU lacks) otherwise.
absl::StatusOr<LoadedEngine> LoadEngineFromFlags(int64_t kv_budget_bytes = 0, int64_t held_kv_sequences = 0,
                                                 int64_t held_kv_copy_bytes = 0);

}  // namespace pdserve

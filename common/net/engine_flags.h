// The engine flags every worker binary shares (--model, --weights-dtype,
// --kv-dtype, --threads, --prefill-chunk), and loading a worker's engine
// from them: checkpoint, fingerprint, and a warmup generation, so that a
// server only listens once it can answer.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/engine/engine.h"

namespace pdserve {

struct LoadedEngine {
  std::unique_ptr<Engine> engine;
  std::string fingerprint;  // ModelFingerprint of the weights
  std::string model_dir;
};

// Reads the flags, loads the model and runs a one-token prefill plus one
// decode step. InvalidArgument for bad flag values; the loader's errors
// (NotFound, DataLoss) otherwise.
absl::StatusOr<LoadedEngine> LoadEngineFromFlags();

}  // namespace pdserve

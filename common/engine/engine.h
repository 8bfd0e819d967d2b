// Engine: a loaded model plus the generation loops (chunked prefill, one
// token per decode step, sampling). The boundary where LibTorch errors
// become absl::Status. Thread-compatible: concurrent calls must use
// different Sequences.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "common/engine/sampler.h"
#include "common/kv/mixed_kv_cache.h"
#include "common/model/checkpoint.h"
#include "common/model/transformer.h"

namespace pdserve {

struct EngineOptions {
  WeightsDtype weights_dtype = WeightsDtype::kF32;
  KvCacheOptions kv;
  int64_t prefill_chunk = 2048;  // tokens per prefill forward (--prefill-chunk)
  int num_threads = 0;           // intra-op threads; 0 = all cores
  // KV bytes the caller may reserve (a decode worker's --kv-budget-mb),
  // counted in Load's memory check; 0 for none.
  int64_t kv_budget_bytes = 0;
  // Sequences of max_context tokens whose KV the caller holds besides that
  // budget (a prefill worker: one per executor, from its prefill until the
  // decode worker acknowledges the hand-off), each with a copy of up to
  // held_kv_copy_bytes on its way out (the hand-off's send queue), counted
  // in the check too.
  int64_t held_kv_sequences = 0;
  int64_t held_kv_copy_bytes = 0;
};

// One sequence being generated: its cache and its position. The clamped
// sinks are the model's, held once by the Engine.
struct Sequence {
  explicit Sequence(MixedKVCache c) : cache(std::move(c)) {}
  MixedKVCache cache;
  int64_t pos = 0;  // tokens already in the cache
};

// Hooks into a prefill (the prefill worker's cancellation and its
// layer-by-layer hand-off).
struct PrefillHooks {
  // Polled before every chunk and after every layer; non-OK stops prefill.
  std::function<absl::Status()> check_cancelled;
  // Called during the last chunk, once per layer, as soon as the layer's
  // K/V are final; non-OK stops prefill and is returned.
  std::function<absl::Status(int64_t layer)> on_layer_final;
};

// One prompt of a batched prefill (Engine::PrefillBatch).
struct PrefillJob {
  Sequence* seq = nullptr;
  const std::vector<int64_t>* ids = nullptr;
  const PrefillHooks* hooks = nullptr;  // may be null
};

struct GenerateRequest {
  std::vector<int64_t> prompt;
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  bool use_cache = true;  // false: replay the whole prefix every step
  bool stop_at_eos = true;
};

class Engine {
 public:
  // Loads a checkpoint directory and sets the intra-op thread count. Before
  // reading any weight it checks that this CPU can run the kernel path
  // (PDSERVE_ISA; FailedPrecondition otherwise) and that the memory estimate
  // fits the container's limit (ResourceExhausted with the numbers), and
  // prints the estimate, the threads and the OpenMP wait policy on stderr.
  static absl::StatusOr<std::unique_ptr<Engine>> Load(const std::string& dir, const EngineOptions& options = {});
  // Wraps weights already in memory (tests, training).
  static std::unique_ptr<Engine> FromWeights(ModelWeights weights, const EngineOptions& options = {});

  const ModelConfig& config() const { return model_.config(); }
  const Transformer& model() const { return model_; }
  const EngineOptions& options() const { return options_; }

  // A fresh sequence with an empty cache.
  std::unique_ptr<Sequence> NewSequence() const;

  // Runs `ids` through the model in chunks of options().prefill_chunk at the
  // sequence's next positions and appends their K/V. Returns the last
  // position's logits [V]. InvalidArgument for bad ids or too long a prompt,
  // ResourceExhausted when the cache cap is hit, and a hook's status when a
  // hook stops it.
  absl::StatusOr<at::Tensor> Prefill(Sequence* seq, const std::vector<int64_t>& ids, int64_t chunk = 0,
                                     const PrefillHooks* hooks = nullptr) const;

  // Prefills several prompts as the segments of one forward, so the weights
  // are read once for all of them. Every prompt is one chunk: the tokens of
  // all jobs together must not exceed options().prefill_chunk
  // (InvalidArgument for every job otherwise). A job's hooks behave as in
  // Prefill, but a hook that fails stops only its own job: the forward goes
  // on for the others and that job's hooks are not called again; when every
  // job has stopped, the forward stops. While the jobs' tokens total at
  // most ExactPrefillBatchTokens(), a job's K/V and logits have the bits of
  // its Prefill alone (engine_test): every matmul runs row by row, and
  // one-token prompts run as a forward of their own. Beyond that the bits
  // depend on the batch, as a chunked prefill's depend on the chunk.
  // Returns, per job, its last position's logits [V] or its error.
  std::vector<absl::StatusOr<at::Tensor>> PrefillBatch(const std::vector<PrefillJob>& jobs) const;
  // The most tokens a PrefillBatch may hold with every job keeping the bits
  // of its Prefill alone: kGemvMaxBatchRows (32), or options().prefill_chunk
  // where every matmul is row by row at any size (bf16 weights under
  // --bf16-matmul dot; int8 weights packed k-major, linear_int8.h).
  int64_t ExactPrefillBatchTokens() const;

  // One batched decode step: token[i] goes to seqs[i] at its next position.
  // Returns logits [B, V].
  absl::StatusOr<at::Tensor> DecodeStep(const std::vector<Sequence*>& seqs, const std::vector<int64_t>& tokens) const;

  // The reference path: a full forward over `ids` with no cache. Returns the
  // last position's logits [V].
  absl::StatusOr<at::Tensor> ForwardNoCache(const std::vector<int64_t>& ids) const;

  // Generates up to max_new_tokens; calls on_token(id) after each one (it may
  // return false to stop). Returns the generated ids.
  absl::StatusOr<std::vector<int64_t>> Generate(const GenerateRequest& request,
                                                const std::function<bool(int64_t)>& on_token = nullptr) const;

  // The n-th token from a logits row [V].
  int64_t Sample(const at::Tensor& logits, const SamplingParams& params, uint64_t n) const;

  // One token per row of logits [B, V]: row i drawn with params[i] as the
  // n[i]-th token, each exactly Sample's, the rows spread over the decode
  // threads (a temperature draw over 128k ids is ~1.5 ms of serial work).
  std::vector<int64_t> SampleRows(const at::Tensor& logits, const std::vector<SamplingParams>& params,
                                  const std::vector<uint64_t>& n) const;

 private:
  Engine(ModelWeights weights, const EngineOptions& options);
  // One forward of PrefillBatch over jobs[group]; fills (*out)[group].
  void PrefillGroup(const std::vector<PrefillJob>& jobs, const std::vector<size_t>& group,
                    std::vector<absl::StatusOr<at::Tensor>>* out) const;
  Transformer model_;
  EngineOptions options_;
  // The model's clamped sinks per layer, computed once (every forward of
  // every sequence uses the same ones).
  std::vector<at::Tensor> sinks_;
};

// "f32", "bf16" or (weights only) "int8": the spelling of the
// --weights-dtype / --kv-dtype flags.
// InvalidArgument naming the value otherwise.
absl::StatusOr<WeightsDtype> ParseWeightsDtype(const std::string& name);
absl::StatusOr<KvDtype> ParseKvDtype(const std::string& name);

// Sets LibTorch's intra-op threads (0 = OMP_NUM_THREADS when set to a
// positive count, else the hardware concurrency). Returns the number in
// effect. New threads take the same count at their first parallel op,
// without the thread pool LibTorch would rebuild for it (engine.cc).
int ConfigureThreads(int num_threads);

}  // namespace pdserve

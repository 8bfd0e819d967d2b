#include "common/engine/engine.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/engine/memory_estimate.h"
#include "common/kernels/bf16_matmul.h"
#include "common/kernels/gemm_dnnl.h"
#include "common/model/cache_layout.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/gemv_tiles.h"
#include "common/model/gptoss_checkpoint.h"
#include "common/model/huge_page_arena.h"
#include "common/kernels/kmajor_packs.h"
#include "common/kernels/linear_int8.h"
#include "common/util/cpu_features.h"
#include "common/util/log.h"
#include "common/util/blas_env.h"
#include "common/util/omp_env.h"
#include "common/util/spin_pool.h"
#include "common/util/status_macros.h"

namespace pdserve {
namespace {

at::Tensor IdsTensor(const std::vector<int64_t>& ids, size_t begin, size_t end) {
  return at::from_blob(const_cast<int64_t*>(ids.data() + begin), {static_cast<int64_t>(end - begin)}, at::kLong)
      .clone();
}

// One held sequence of max_context tokens: its KV, and its copy on the way
// out (EngineOptions::held_kv_copy_bytes at most).
int64_t HeldSequenceBytes(const ModelConfig& config, const EngineOptions& options) {
  const int64_t kv = MixedKVCache::BytesFor(CacheLayout(config), options.kv.dtype, config.max_context);
  return kv + std::min(kv, std::max<int64_t>(0, options.held_kv_copy_bytes));
}

// Load's checks before any weight is read: the forced ISA, and the memory
// estimate against the container's limit (printed either way). A directory
// without a readable config is left to LoadCheckpoint's errors.
absl::Status CheckHostCanLoad(const std::string& dir, const EngineOptions& options) {
  RETURN_IF_ERROR(HostIsa().status());
  auto config = LoadModelConfig((std::filesystem::path(dir) / "config.json").string());
  if (!config.ok()) return absl::OkStatus();
  const MemoryEstimate estimate =
      EstimateMemory(*config, options.weights_dtype, options.kv.dtype,
                     options.kv_budget_bytes + options.held_kv_sequences * HeldSequenceBytes(*config, options),
                     options.prefill_chunk, GetBf16Matmul(),
                     PacksLayerWeights(options.weights_dtype));
  ASSIGN_OR_RETURN(const MemoryLimit limit, ContainerMemoryLimit());
  log::Info(DescribeMemory(estimate, limit), {}, log::TextPrefix::Named("pdserve"));
  return CheckMemoryFits(estimate, limit);
}

}  // namespace

absl::StatusOr<WeightsDtype> ParseWeightsDtype(const std::string& name) {
  if (name == "f32") return WeightsDtype::kF32;
  if (name == "bf16") return WeightsDtype::kBF16;
  if (name == "int8") return WeightsDtype::kInt8;
  return absl::InvalidArgumentError(absl::StrCat("weights dtype must be f32, bf16 or int8, got '", name, "'"));
}

absl::StatusOr<KvDtype> ParseKvDtype(const std::string& name) {
  if (name == "f32") return KvDtype::kF32;
  if (name == "bf16") return KvDtype::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("KV dtype must be f32 or bf16, got '", name, "'"));
}

}  // namespace pdserve

// LibTorch 1.13's at::set_num_threads also rebuilds caffe2's pthreadpool (the
// pool of its QNNPACK/XNNPACK/NNPACK kernels, which pdserve never calls), and
// LibTorch calls set_num_threads again on every thread's first parallel op
// (at::internal::lazy_init_num_threads). Each rebuild starts workers that
// spin-wait ~1M pause iterations for work that never comes: 28 ms of CPU per
// new thread that touches a tensor (measured on the Zen 4 EPYC), stolen from
// the engine's threads on the same cores. gRPC's callback threads come and
// go, and the decode worker imports a hand-off's K/V on them: a hand-off
// landing on a fresh thread cost more CPU in that pool than receiving and
// checking its bytes. This definition takes precedence over
// libpthreadpool's for LibTorch (an executable's symbols come first in the
// dynamic lookup; the linker exports it because libtorch_cpu references it),
// and returns no pool: pthreadpool's API runs a NULL pool's work on the
// caller, so those kernels would run on one thread. engine_test checks it is
// in effect.
extern "C" void* pthreadpool_create(size_t /*threads_count*/) { return nullptr; }

namespace pdserve {

int ConfigureThreads(int num_threads) {
  if (num_threads <= 0) {
    // OMP_NUM_THREADS when it is a positive count (as LibTorch and
    // llama.cpp read it; the k8s manifests and the TSan job set it).
    const char* omp = std::getenv("OMP_NUM_THREADS");
    int n = 0;
    if (omp != nullptr && absl::SimpleAtoi(omp, &n) && n > 0) num_threads = n;
  }
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(num_threads);
  return at::get_num_threads();
}

Engine::Engine(ModelWeights weights, const EngineOptions& options)
    : model_(std::move(weights)), options_(options) {
  ConfigureThreads(options.num_threads);
  at::NoGradGuard no_grad;
  sinks_ = model_.ClampedSinks();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Load(const std::string& dir, const EngineOptions& options) {
  RETURN_IF_ERROR(CheckHostCanLoad(dir, options));
  LoadOptions lo;
  lo.weights_dtype = options.weights_dtype;
  ASSIGN_OR_RETURN(ModelWeights w, LoadCheckpoint(dir, lo));
  const int64_t weight_mib = WeightBytes(w) >> 20;
  auto engine = std::unique_ptr<Engine>(new Engine(std::move(w), options));  // the Transformer places them
  const int64_t huge_mib = AnonHugePageBytes() >> 20;
  // dot and amx round activations to bf16, int8's dot kernel to int8: say so where it applies.
  std::string matmul;
  if (options.weights_dtype == WeightsDtype::kBF16) {
    matmul = absl::StrCat(" (bf16 matmul ", Bf16MatmulName(GetBf16Matmul()), ")");
  } else if (options.weights_dtype == WeightsDtype::kInt8) {
    matmul = absl::StrCat(" (int8 kernel ", Q8KernelIsDot() ? "dot" : "fma",
                          engine->model().kmajor_packs() != nullptr ? ", k-major packs" : "",
                          Q8KernelIsDot() ? absl::StrCat(", ", GemvIsaName(GemvQ8DotIsa()), " build") : "", ")");
  }
  log::Info(absl::StrFormat("weights %d MiB%s; process memory on 2 MiB pages: %d MiB%s", weight_mib, matmul,
                            std::max<int64_t>(huge_mib, 0),
                            !HugePagesEnabled() ? " (PDSERVE_HUGE_PAGES=0)"
                            : huge_mib <= 0     ? " (transparent huge pages unavailable: weights on 4 KiB pages)"
                                                : ""),
            {{"weight_mib", weight_mib}, {"huge_page_mib", huge_mib}}, log::TextPrefix::Named("pdserve"));
  log::Info(absl::StrFormat("%d threads, %s, %s, %s, ISA %s (%s), %s", at::get_num_threads(), OmpWaitPolicySummary(),
                            SpinPoolSummary(),
                            OpenBlasSummary(), IsaName(*HostIsa()), CpuFeaturesString(HostCpuFeatures()),
                            MallocSummary()),
            {{"threads", at::get_num_threads()}}, log::TextPrefix::Named("pdserve"));
  return engine;
}

std::unique_ptr<Engine> Engine::FromWeights(ModelWeights weights, const EngineOptions& options) {
  return std::unique_ptr<Engine>(new Engine(std::move(weights), options));
}

std::unique_ptr<Sequence> Engine::NewSequence() const {
  return std::make_unique<Sequence>(MixedKVCache(CacheLayout(config()), options_.kv));
}

namespace {

// What a prefill's hooks say (OK when there are none): cancelled or not,
// then, with_layer, the hand-off of `layer`'s final K/V.
absl::Status PollHooks(const PrefillHooks* hooks, bool with_layer, int64_t layer) {
  if (hooks == nullptr) return absl::OkStatus();
  if (hooks->check_cancelled) RETURN_IF_ERROR(hooks->check_cancelled());
  if (with_layer && hooks->on_layer_final) return hooks->on_layer_final(layer);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<at::Tensor> Engine::Prefill(Sequence* seq, const std::vector<int64_t>& ids, int64_t chunk,
                                           const PrefillHooks* hooks) const {
  if (ids.empty()) return absl::InvalidArgumentError("prefill needs at least one token");
  if (chunk <= 0) chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : static_cast<int64_t>(ids.size());
  at::NoGradGuard no_grad;
  // The whole prompt's rows at once: chunks then append in place, instead of
  // growing the cache by half again (and copying it) as they come, which at
  // 128K held ~2.5x the prompt's K/V at the peak.
  RETURN_IF_ERROR(seq->cache.Reserve(seq->pos + static_cast<int64_t>(ids.size())));
  at::Tensor logits;
  ForwardOptions fo;
  fo.sinks = &sinks_;
  for (size_t begin = 0; begin < ids.size(); begin += chunk) {
    const size_t end = std::min(ids.size(), begin + static_cast<size_t>(chunk));
    if (hooks != nullptr) {
      RETURN_IF_ERROR(PollHooks(hooks, false, 0));
      const bool last = end == ids.size();
      fo.after_layer = [hooks, last](int64_t layer) { return PollHooks(hooks, last, layer); };
    }
    Segment s{&seq->cache, seq->pos, static_cast<int64_t>(end - begin)};
    ASSIGN_OR_RETURN(logits, model_.Forward(IdsTensor(ids, begin, end), {s}, fo));
    seq->pos += s.length;
  }
  return logits.select(0, 0);
}

namespace {

// The first problem of a batched prefill's jobs, or OK.
absl::Status CheckPrefillJobs(const std::vector<PrefillJob>& jobs, int64_t chunk) {
  if (jobs.empty()) return absl::InvalidArgumentError("a batched prefill needs at least one job");
  int64_t total = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].seq == nullptr || jobs[i].ids == nullptr || jobs[i].ids->empty()) {
      return absl::InvalidArgumentError(absl::StrCat("prefill job ", i, " has no sequence or no tokens"));
    }
    total += static_cast<int64_t>(jobs[i].ids->size());
  }
  if (chunk > 0 && total > chunk) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batched prefill of ", jobs.size(), " prompts has ", total, " tokens; the chunk is ", chunk));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<absl::StatusOr<at::Tensor>> Engine::PrefillBatch(const std::vector<PrefillJob>& jobs) const {
  const absl::Status bad = CheckPrefillJobs(jobs, options_.prefill_chunk);
  if (!bad.ok()) return std::vector<absl::StatusOr<at::Tensor>>(jobs.size(), bad);
  // A one-token prompt alone takes the decode step's attention kernel, a
  // longer one the prompt path: so that no job's bits depend on its
  // company, the one-token prompts form a forward of their own.
  std::vector<size_t> single, multi;
  for (size_t i = 0; i < jobs.size(); ++i) (jobs[i].ids->size() == 1 ? single : multi).push_back(i);
  std::vector<absl::StatusOr<at::Tensor>> out(jobs.size(), absl::UnknownError("not prefilled"));
  for (const std::vector<size_t>* group : {&single, &multi}) {
    if (!group->empty()) PrefillGroup(jobs, *group, &out);
  }
  return out;
}

void Engine::PrefillGroup(const std::vector<PrefillJob>& jobs, const std::vector<size_t>& group,
                          std::vector<absl::StatusOr<at::Tensor>>* out) const {
  // The jobs whose hooks let them start go into the forward, in order.
  std::vector<size_t> live;
  std::vector<absl::Status> stopped(jobs.size());
  for (size_t i : group) {
    stopped[i] = PollHooks(jobs[i].hooks, false, 0);
    if (stopped[i].ok()) live.push_back(i);
  }
  std::vector<int64_t> ids;
  std::vector<Segment> segs;
  for (size_t i : live) {
    const PrefillJob& j = jobs[i];
    ids.insert(ids.end(), j.ids->begin(), j.ids->end());
    segs.push_back({&j.seq->cache, j.seq->pos, static_cast<int64_t>(j.ids->size())});
  }
  absl::StatusOr<at::Tensor> logits = absl::CancelledError("every prompt of the batch stopped before the forward");
  if (!live.empty()) {
    at::NoGradGuard no_grad;
    ForwardOptions fo;
    fo.sinks = &sinks_;
    size_t running = live.size();
    fo.after_layer = [&](int64_t layer) -> absl::Status {
      for (size_t i : live) {
        if (!stopped[i].ok()) continue;
        stopped[i] = PollHooks(jobs[i].hooks, true, layer);
        if (!stopped[i].ok() && --running == 0) return stopped[i];
      }
      return absl::OkStatus();
    };
    logits = model_.Forward(IdsTensor(ids, 0, ids.size()), segs, fo);
  }
  for (size_t i : group) {
    if (!stopped[i].ok()) {
      (*out)[i] = stopped[i];
    } else if (!logits.ok()) {
      (*out)[i] = logits.status();
    } else {
      jobs[i].seq->pos += static_cast<int64_t>(jobs[i].ids->size());
      const int64_t row = std::find(live.begin(), live.end(), i) - live.begin();
      (*out)[i] = logits->select(0, row);
    }
  }
}

int64_t Engine::ExactPrefillBatchTokens() const {
  const at::ScalarType t =
      model_.weights().layers.empty() ? at::kFloat : model_.weights().layers[0].q_proj.scalar_type();
  // One kernel for any number of rows: bf16 under dot, int8 from k-major packs.
  const bool one_kernel = (t == at::kBFloat16 && GetBf16Matmul() == Bf16Matmul::kDot) ||
                          (t == at::kChar && model_.kmajor_packs() != nullptr);
  return one_kernel ? options_.prefill_chunk : kGemvMaxBatchRows;
}

absl::StatusOr<at::Tensor> Engine::DecodeStep(const std::vector<Sequence*>& seqs,
                                              const std::vector<int64_t>& tokens) const {
  if (seqs.size() != tokens.size() || seqs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("decode step with ", seqs.size(), " sequences and ",
                                                   tokens.size(), " tokens"));
  }
  at::NoGradGuard no_grad;
  std::vector<Segment> segs;
  for (Sequence* s : seqs) segs.push_back({&s->cache, s->pos, 1});
  ForwardOptions fo;
  fo.sinks = &sinks_;
  ASSIGN_OR_RETURN(at::Tensor logits, model_.Forward(IdsTensor(tokens, 0, tokens.size()), segs, fo));
  for (Sequence* s : seqs) ++s->pos;
  return logits;
}

absl::StatusOr<at::Tensor> Engine::ForwardNoCache(const std::vector<int64_t>& ids) const {
  if (ids.empty()) return absl::InvalidArgumentError("forward needs at least one token");
  at::NoGradGuard no_grad;
  Segment s{nullptr, 0, static_cast<int64_t>(ids.size())};
  ASSIGN_OR_RETURN(at::Tensor logits, model_.Forward(IdsTensor(ids, 0, ids.size()), {s}));
  return logits.select(0, 0);
}

int64_t Engine::Sample(const at::Tensor& logits, const SamplingParams& params, uint64_t n) const {
  at::Tensor row = logits.to(at::kFloat).contiguous();
  return SampleToken(row.data_ptr<float>(), row.numel(), params, n);
}

std::vector<int64_t> Engine::SampleRows(const at::Tensor& logits, const std::vector<SamplingParams>& params,
                                        const std::vector<uint64_t>& n) const {
  const at::Tensor rows = logits.to(at::kFloat).contiguous();
  const int64_t B = rows.size(0), V = rows.size(1);
  std::vector<int64_t> out(static_cast<size_t>(B));
  const float* l = rows.data_ptr<float>();
  ForEachChunk(B, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) out[r] = SampleToken(l + r * V, V, params[r], n[r]);
  });
  return out;
}

absl::StatusOr<std::vector<int64_t>> Engine::Generate(const GenerateRequest& req,
                                                      const std::function<bool(int64_t)>& on_token) const {
  if (req.max_new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens must be >= 1, got ", req.max_new_tokens));
  }
  const int64_t total = static_cast<int64_t>(req.prompt.size()) + req.max_new_tokens;
  if (total > config().max_context) {
    return absl::InvalidArgumentError(absl::StrCat("prompt (", req.prompt.size(), ") + max_new_tokens (",
                                                   req.max_new_tokens, ") = ", total, " exceeds max_context ",
                                                   config().max_context));
  }
  std::vector<int64_t> out;
  std::unique_ptr<Sequence> seq;
  at::Tensor logits;
  if (req.use_cache) {
    seq = NewSequence();
    ASSIGN_OR_RETURN(logits, Prefill(seq.get(), req.prompt));
  } else {
    ASSIGN_OR_RETURN(logits, ForwardNoCache(req.prompt));
  }
  std::vector<int64_t> prefix = req.prompt;
  for (int64_t n = 0; n < req.max_new_tokens; ++n) {
    const int64_t tok = Sample(logits, req.sampling, static_cast<uint64_t>(n));
    out.push_back(tok);
    if (on_token && !on_token(tok)) break;
    if (req.stop_at_eos && config().IsStopToken(tok)) break;
    if (n + 1 == req.max_new_tokens) break;
    if (req.use_cache) {
      ASSIGN_OR_RETURN(at::Tensor step, DecodeStep({seq.get()}, {tok}));
      logits = step.select(0, 0);
    } else {
      prefix.push_back(tok);
      ASSIGN_OR_RETURN(logits, ForwardNoCache(prefix));
    }
  }
  return out;
}

}  // namespace pdserve

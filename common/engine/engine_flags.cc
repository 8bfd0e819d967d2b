#include "common/engine/engine_flags.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kernels/bf16_matmul.h"
#include "common/model/fingerprint.h"
#include "common/kernels/gemm_dnnl.h"
#include "common/kernels/linear_int8.h"
#include "common/model/moe_mxfp4.h"
#include "common/util/log.h"
#include "common/util/status_macros.h"

ABSL_FLAG(std::string, model, "",
          "Checkpoint directory: pdserve's own (config.json + model.safetensors), or a Hugging Face gpt-oss "
          "snapshot (config.json, model.safetensors.index.json and its shards, tokenizer.json; MXFP4 experts "
          "read from the read-only mapping).");
ABSL_FLAG(std::string, weights_dtype, "f32",
          "Matmul weights in memory: f32, bf16 or int8 (Q8_0: blocks of 32 int8 + an fp16 scale, quantized at load; "
          "the kernel: --q8-kernel).");
ABSL_FLAG(std::string, q8_kernel, "auto",
          "Kernel of int8 weights: dot (x quantized per block of 32 too, as llama.cpp's Q8_0 does; the weights "
          "are packed k-major at load in place of their rows, the same memory, for one kernel in prefill and "
          "decode: vpdpbusd on AVX-512 VNNI CPUs, vpmaddubsw on AVX2 ones; PDSERVE_Q8_KMAJOR=0 keeps the rows), "
          "fma (x stays fp32: only the weights are rounded; the smaller error, slower from 4 sequences up) or "
          "auto (dot where the CPU has AVX2 + FMA + F16C, else fma).");
ABSL_FLAG(std::string, mxfp4_kernel, "fma",
          "Kernel of a gpt-oss checkpoint's MXFP4 experts: fma (activations stay fp32: only the weights' own "
          "rounding) or dot (activations quantized to int8 per block of 32 as llama.cpp does: vpdpbusd on AVX-512 "
          "VNNI CPUs; faster, changes numerics).");
ABSL_FLAG(std::string, kv_dtype, "f32", "KV cache storage and hand-off: f32 or bf16 (bf16 halves the bytes moved).");
ABSL_FLAG(int, threads, pdserve::EngineOptions{}.num_threads,
          "Intra-op threads; 0 = OMP_NUM_THREADS when set, else all cores.");
ABSL_FLAG(int64_t, prefill_chunk, pdserve::EngineOptions{}.prefill_chunk,
          "Prefill chunk size in tokens: prompt tokens per forward pass. Larger chunks run the expert GEMMs on more "
          "rows per call (bf16 weights are widened once per chunk) at the cost of more activation memory and a "
          "longer wait for a cancel to take effect (checked after every layer).");
ABSL_FLAG(std::string, bf16_matmul, "auto",
          "GEMMs of bf16 weights: widen (to fp32, exact), split (activations split into three bf16 "
          "terms on AMX-BF16 tiles with fp32 accumulation: fp32 accuracy), amx (prefill only: bf16 activations "
          "and outputs through oneDNN; changes numerics), dot (prefill and decode: activations rounded to bf16, "
          "AVX512-BF16 dot products into fp32, as llama.cpp's BF16 path, from the k-major packs that kmajor "
          "makes; changes numerics), kmajor (each bf16 matrix "
          "repacked k-major at load in place of its row-major copy, the same memory; decode: exact fp32 "
          "products register-blocked across a batch's rows, faster; prefill widens the packs exactly; a "
          "different summation order, so logits differ from widen's in the last bits; needs AVX2+FMA) or auto (split where "
          "the CPU runs the amx ISA, see PDSERVE_ISA, else kmajor where the CPU has AVX-512, else widen). split and amx are refused at start on CPUs "
          "without AMX-BF16, dot on CPUs without AVX512-BF16.");

ABSL_FLAG(bool, f32_packed_weights, false,
          "Also keep each layer's matmul weights as fp32 in oneDNN's blocked layout, packed at load, for the "
          "prefill GEMMs (more than 32 rows). With --weights-dtype f32: about 10% faster prefill at 512 tokens on "
          "AVX-512, for as much memory again as those weights. With bf16 weights on the widen path "
          "(--bf16-matmul widen): no widening per GEMM, the same bits, for twice the memory of those weights. "
          "Counted in the memory estimate. Decode reads the weights as before. No effect with int8 weights or "
          "the other bf16 paths.");

namespace pdserve {

absl::StatusOr<EngineFlags> EngineFlagsFromCommandLine() {
  EngineFlags out;
  out.model_dir = absl::GetFlag(FLAGS_model);
  if (out.model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  ASSIGN_OR_RETURN(out.options, EngineOptionsFromCommandLine());
  return out;
}

absl::StatusOr<EngineOptions> EngineOptionsFromCommandLine() {
  EngineOptions options;
  const std::string weights = absl::GetFlag(FLAGS_weights_dtype);
  auto wd = ParseWeightsDtype(weights);
  if (!wd.ok()) return absl::InvalidArgumentError(absl::StrCat("--weights-dtype=", weights, ": ", wd.status().message()));
  const std::string kv = absl::GetFlag(FLAGS_kv_dtype);
  auto kd = ParseKvDtype(kv);
  if (!kd.ok()) return absl::InvalidArgumentError(absl::StrCat("--kv-dtype=", kv, ": ", kd.status().message()));
  options.weights_dtype = *wd;
  options.kv.dtype = *kd;
  options.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  options.num_threads = absl::GetFlag(FLAGS_threads);
  if (options.prefill_chunk < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--prefill-chunk=", options.prefill_chunk, ": must be >= 1"));
  }
  const std::string bf16_matmul = absl::GetFlag(FLAGS_bf16_matmul);
  auto bm = ParseBf16Matmul(bf16_matmul);
  if (!bm.ok()) {
    return absl::Status(bm.status().code(),
                        absl::StrCat("--bf16-matmul=", bf16_matmul, ": ", bm.status().message()));
  }
  RETURN_IF_ERROR(SetBf16Matmul(*bm));
  const std::string q8_kernel = absl::GetFlag(FLAGS_q8_kernel);
  auto qk = ParseQ8Kernel(q8_kernel);
  if (!qk.ok()) return absl::InvalidArgumentError(absl::StrCat("--q8-kernel=", q8_kernel, ": ", qk.status().message()));
  SetQ8Kernel(*qk);
  const std::string mxfp4_kernel = absl::GetFlag(FLAGS_mxfp4_kernel);
  auto mk = ParseMxfp4Kernel(mxfp4_kernel);
  if (!mk.ok()) return mk.status();
  SetMoeMxfp4Kernel(*mk);
  SetPackF32Weights(absl::GetFlag(FLAGS_f32_packed_weights));
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--threads=", options.num_threads, ": must be >= 0"));
  }
  return options;
}

absl::StatusOr<LoadedEngine> LoadEngineFromFlags(int64_t kv_budget_bytes, int64_t held_kv_sequences,
                                                 int64_t held_kv_copy_bytes) {
  ASSIGN_OR_RETURN(EngineFlags flags, EngineFlagsFromCommandLine());
  flags.options.kv_budget_bytes = kv_budget_bytes;
  flags.options.held_kv_sequences = held_kv_sequences;
  flags.options.held_kv_copy_bytes = held_kv_copy_bytes;
  LoadedEngine out;
  out.model_dir = flags.model_dir;
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(out.engine, Engine::Load(out.model_dir, flags.options));
  out.fingerprint = out.engine->model().Fingerprint();
  // Warmup: the first forward pays for allocator and kernel setup.
  auto seq = out.engine->NewSequence();
  ASSIGN_OR_RETURN(at::Tensor logits, out.engine->Prefill(seq.get(), {0}));
  const int64_t tok = out.engine->Sample(logits, SamplingParams{}, 0);
  RETURN_IF_ERROR(out.engine->DecodeStep({seq.get()}, {tok}).status());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::Info(absl::StrFormat("loaded %s (%s, fingerprint %s) and warmed up in %.2f s", out.model_dir,
                            out.engine->config().name, out.fingerprint, s),
            {{"model_dir", out.model_dir}, {"fingerprint", out.fingerprint}, {"load_s", s}}, log::TextPrefix::None());
  return out;
}

}  // namespace pdserve

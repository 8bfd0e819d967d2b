#include "common/model/checkpoint.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model/gptoss_weights.h"
#include "common/kernels/linear_int8.h"
#include "common/util/status_macros.h"

namespace pdserve {
namespace {

at::ScalarType ToScalarType(StDtype d) {
  switch (d) {
    case StDtype::kBF16: return at::kBFloat16;
    case StDtype::kF16: return at::kHalf;
    default: return at::kFloat;
  }
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Architecture fields that must agree between two configs.
absl::Status CompareConfigs(const ModelConfig& want, const ModelConfig& got) {
  auto check = [](const char* field, auto a, auto b) -> absl::Status {
    if (a == b) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("config mismatch on '", field, "': expected ", a,
                                                   ", checkpoint has ", b));
  };
  RETURN_IF_ERROR(check("vocab_size", want.vocab_size, got.vocab_size));
  RETURN_IF_ERROR(check("d_model", want.d_model, got.d_model));
  RETURN_IF_ERROR(check("n_layers", want.n_layers, got.n_layers));
  RETURN_IF_ERROR(check("n_heads", want.n_heads, got.n_heads));
  RETURN_IF_ERROR(check("n_kv_heads", want.n_kv_heads, got.n_kv_heads));
  RETURN_IF_ERROR(check("head_dim", want.head_dim, got.head_dim));
  RETURN_IF_ERROR(check("window", want.window, got.window));
  RETURN_IF_ERROR(check("n_experts", want.n_experts, got.n_experts));
  RETURN_IF_ERROR(check("top_k", want.top_k, got.top_k));
  RETURN_IF_ERROR(check("n_shared_experts", want.n_shared_experts, got.n_shared_experts));
  RETURN_IF_ERROR(check("expert_hidden", want.expert_hidden, got.expert_hidden));
  RETURN_IF_ERROR(check("tie_embeddings", want.tie_embeddings, got.tie_embeddings));
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCheckpoint(const SafetensorsFile& file, const ModelConfig& config) {
  ModelWeights shapes;
  shapes.config = config;
  for (const NamedTensor& nt : NamedTensors(&shapes)) {
    const StTensorView* v = file.Find(nt.name);
    if (v == nullptr) {
      return absl::DataLossError(absl::StrCat("checkpoint '", file.path(), "' is missing tensor '", nt.name,
                                              "' (expected shape ", ShapeString(nt.shape), ")"));
    }
    if (v->dtype != StDtype::kF32 && v->dtype != StDtype::kBF16 && v->dtype != StDtype::kF16) {
      return absl::DataLossError(absl::StrCat("tensor '", nt.name, "' has dtype ", v->dtype_name,
                                              ", expected F32, BF16 or F16"));
    }
    if (v->shape != nt.shape) {
      return absl::DataLossError(absl::StrCat("tensor '", nt.name, "' has shape ", ShapeString(v->shape),
                                              ", expected ", ShapeString(nt.shape)));
    }
  }
  return absl::OkStatus();
}

at::Tensor ConvertWeight(const at::Tensor& t, bool matmul, WeightsDtype dtype) {
  if (matmul && dtype == WeightsDtype::kInt8 && Q8Quantizable(t.size(-1))) return QuantizeQ8(t);
  const at::ScalarType want = matmul && dtype == WeightsDtype::kBF16 ? at::kBFloat16 : at::kFloat;
  return t.scalar_type() == want ? t : t.to(want);
}

void ConvertWeights(ModelWeights* w, WeightsDtype dtype) {
  for (NamedTensor& nt : NamedTensors(w)) *nt.tensor = ConvertWeight(*nt.tensor, nt.is_matmul_weight, dtype);
}

absl::StatusOr<ModelWeights> LoadCheckpoint(const std::string& dir, const LoadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("model directory '", dir, "' does not exist"));
  }
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig((fs::path(dir) / "config.json").string()));
  if (options.expected_config != nullptr) RETURN_IF_ERROR(CompareConfigs(*options.expected_config, config));
  if (config.family == ModelFamily::kGptOss) return LoadGptOssWeights(dir, config, options.weights_dtype);
  ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open((fs::path(dir) / "model.safetensors").string()));
  RETURN_IF_ERROR(ValidateCheckpoint(*file, config));

  ModelWeights w;
  w.config = config;
  try {
    for (NamedTensor& nt : NamedTensors(&w)) {
      const StTensorView& v = *file->Find(nt.name);
      // One copy out of the mapping (also fixes any misalignment), then a
      // dtype conversion only when the stored dtype differs.
      at::Tensor raw = at::empty(nt.shape, at::TensorOptions().dtype(ToScalarType(v.dtype)));
      std::memcpy(raw.data_ptr(), v.data, v.nbytes);
      *nt.tensor = ConvertWeight(raw, nt.is_matmul_weight, options.weights_dtype);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("converting '", dir, "' failed: ", e.what_without_backtrace()));
  }
  return w;
}

absl::Status SaveCheckpoint(const ModelWeights& weights, const std::string& dir, StDtype dtype) {
  namespace fs = std::filesystem;
  if (dtype != StDtype::kF32 && dtype != StDtype::kBF16 && dtype != StDtype::kF16) {
    return absl::InvalidArgumentError("checkpoint dtype must be F32, BF16 or F16");
  }
  if (weights.config.family == ModelFamily::kGptOss) {
    return absl::InvalidArgumentError(
        "gpt-oss weights are saved in their own (Hugging Face, MXFP4) layout only: pdserve does not write it");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  {
    std::ofstream cfg(fs::path(dir) / "config.json", std::ios::trunc);
    cfg << weights.config.ToJson() << "\n";
    if (!cfg) return absl::InternalError(absl::StrCat("cannot write ", dir, "/config.json"));
  }
  ModelWeights& w = const_cast<ModelWeights&>(weights);  // NamedTensors only reads here
  std::vector<at::Tensor> keep;
  std::vector<StTensorToWrite> out;
  for (const NamedTensor& nt : NamedTensors(&w)) {
    if (!nt.tensor->defined()) return absl::InvalidArgumentError(absl::StrCat("tensor '", nt.name, "' is unset"));
    if (nt.tensor->sizes().vec() != nt.shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", nt.name, "' has shape ",
                                                     ShapeString(nt.tensor->sizes().vec()), ", expected ",
                                                     ShapeString(nt.shape)));
    }
    at::Tensor t = nt.tensor->detach().to(ToScalarType(dtype)).contiguous();
    keep.push_back(t);
    out.push_back({nt.name, dtype, nt.shape, t.data_ptr(), static_cast<size_t>(t.numel() * t.element_size())});
  }
  return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), out);
}

}  // namespace pdserve

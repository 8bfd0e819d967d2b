#include "common/model/sharded_safetensors.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/model/config.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kIndexName[] = "model.safetensors.index.json";
constexpr char kSingleName[] = "model.safetensors";

absl::StatusOr<std::string> ReadIndex(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read ", path.string(), ": ", ec.message()));
  if (size > kMaxIndexBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), " is ", size, " bytes, above the limit of ", kMaxIndexBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The index's weight_map, checked for shape and for file names that stay
// inside the model directory.
absl::StatusOr<json> ParseWeightMap(const std::string& text, const std::string& where) {
  RETURN_IF_ERROR(CheckJsonNesting(text, kMaxJsonDepth, where));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not a JSON object with a \"weight_map\" object"));
  }
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    const std::string name = file.is_string() ? file.get<std::string>() : "";
    if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos ||
        name == "." || name == "..") {
      return absl::InvalidArgumentError(absl::StrCat(where, " maps '", tensor.substr(0, 80), "' to ",
                                                     JsonExcerpt(file), ": a file name in the model directory"));
    }
  }
  return j;
}

}  // namespace

absl::StatusOr<size_t> ShardedSafetensors::MapShard(const std::string& file) {
  if (auto it = file_index_.find(file); it != file_index_.end()) return it->second;
  if (files_.size() >= kMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat("the index names more than ", kMaxShards, " shards"));
  }
  const fs::path path = fs::path(dir_) / file;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(kIndexName, " names shard '", file, "', which is not in '", dir_, "'"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> shard, SafetensorsFile::Open(path.string()));
  files_.push_back(std::move(shard));
  file_index_[file] = files_.size() - 1;
  return files_.size() - 1;
}

absl::StatusOr<std::unique_ptr<ShardedSafetensors>> ShardedSafetensors::Open(const std::string& dir) {
  std::unique_ptr<ShardedSafetensors> s(new ShardedSafetensors());
  s->dir_ = dir;
  const fs::path index = fs::path(dir) / kIndexName;
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    if (!fs::exists(fs::path(dir) / kSingleName, ec)) {
      return absl::NotFoundError(absl::StrCat("'", dir, "' has neither ", kIndexName, " nor ", kSingleName));
    }
    ASSIGN_OR_RETURN(const size_t f, s->MapShard(kSingleName));
    for (const auto& [name, view] : s->files_[f]->tensors()) {
      s->tensors_[name] = &view;
      s->tensor_file_[name] = f;
    }
    return s;
  }
  ASSIGN_OR_RETURN(const std::string text, ReadIndex(index));
  ASSIGN_OR_RETURN(const json j, ParseWeightMap(text, index.string()));
  uint64_t bytes = 0;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    ASSIGN_OR_RETURN(const size_t f, s->MapShard(file.get<std::string>()));
    const StTensorView* view = s->files_[f]->Find(tensor);
    if (view == nullptr) {
      return absl::DataLossError(absl::StrCat(index.string(), " puts tensor '", tensor.substr(0, 80), "' in '",
                                              file.get<std::string>(), "', which does not hold it"));
    }
    s->tensors_[tensor] = view;
    s->tensor_file_[tensor] = f;
    bytes += view->nbytes;
  }
  const json* total = j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size")
                          ? &j["metadata"]["total_size"]
                          : nullptr;
  if (total != nullptr && (!total->is_number_unsigned() || total->get<uint64_t>() != bytes)) {
    return absl::DataLossError(absl::StrCat(index.string(), " says metadata.total_size ", JsonExcerpt(*total),
                                            ", but its tensors hold ", bytes, " bytes"));
  }
  return s;
}

const StTensorView* ShardedSafetensors::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::string ShardedSafetensors::FileOf(const std::string& name) const {
  auto it = tensor_file_.find(name);
  return it == tensor_file_.end() ? std::string() : files_[it->second]->path();
}

}  // namespace pdserve

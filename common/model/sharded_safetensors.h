// ShardedSafetensors: a checkpoint's tensors across its safetensors files,
// found the way Hugging Face publishes them: the shards that
// `model.safetensors.index.json` names ({"metadata": {"total_size": N},
// "weight_map": {tensor: file}}; gpt-oss numbers them from 0,
// model-00000-of-00002 .. model-00002-of-00002), or one `model.safetensors`
// when there is no index. Every shard is mapped read-only
// (SafetensorsFile); views stay valid for the object's lifetime. No
// LibTorch here.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/safetensors.h"

namespace pdserve {

// At most this many shards, and this many bytes of index JSON (gpt-oss-120b
// has 15 shards and a ~40 KB index).
inline constexpr size_t kMaxShards = 4096;
inline constexpr size_t kMaxIndexBytes = size_t{64} << 20;

class ShardedSafetensors {
 public:
  // Opens `dir`'s index, or its model.safetensors alone, and maps every
  // shard. Errors are one line naming the file and the value:
  //   NotFound      neither file exists; a shard the index names is missing;
  //   DataLoss      a shard is truncated or corrupt (SafetensorsFile::Open);
  //                 the index maps a tensor to a shard that lacks it;
  //                 metadata.total_size is not the index's tensors' bytes;
  //   InvalidArgument  the index is not JSON of that shape, names a file
  //                 outside `dir`, or is over the limits above.
  static absl::StatusOr<std::unique_ptr<ShardedSafetensors>> Open(const std::string& dir);

  // nullptr when absent.
  const StTensorView* Find(const std::string& name) const;
  // The file holding `name` ("" when absent), for messages.
  std::string FileOf(const std::string& name) const;
  // Every tensor, by name.
  const std::map<std::string, const StTensorView*>& tensors() const { return tensors_; }
  size_t num_files() const { return files_.size(); }

 private:
  ShardedSafetensors() = default;
  // Maps `file` (a name inside dir_) once; its index in files_.
  absl::StatusOr<size_t> MapShard(const std::string& file);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> file_index_;  // shard file name -> files_ index
  std::map<std::string, const StTensorView*> tensors_;
  std::map<std::string, size_t> tensor_file_;  // tensor -> files_ index
};

}  // namespace pdserve

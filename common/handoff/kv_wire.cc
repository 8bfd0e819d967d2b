#include "common/handoff/kv_wire.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/handoff/crc32c.h"
#include "common/net/sampling_validation.h"
#include "common/util/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace pdserve {
namespace {

using internal::v1::KvChunk;
using internal::v1::KvHeader;

int64_t ElemBytes(internal::v1::KvDtype d) {
  switch (d) {
    case internal::v1::KV_DTYPE_F32: return 4;
    case internal::v1::KV_DTYPE_BF16: return 2;
    default: return 0;
  }
}

at::ScalarType ScalarOf(internal::v1::KvDtype d) {
  return d == internal::v1::KV_DTYPE_BF16 ? at::kBFloat16 : at::kFloat;
}

std::string Deterministic(const google::protobuf::MessageLite& h) {
  std::string out;
  google::protobuf::io::StringOutputStream raw(&out);
  google::protobuf::io::CodedOutputStream coded(&raw);
  coded.SetSerializationDeterministic(true);
  h.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

int64_t LayerBytes(const ModelConfig& c, int64_t layer, int64_t prompt_len, int64_t elem) {
  return HandoffRows(c, layer, prompt_len) * c.n_kv_heads * c.head_dim * elem;
}

absl::Status Reject(const std::string& why) { return absl::FailedPreconditionError("KV hand-off rejected: " + why); }

}  // namespace

int64_t HandoffRows(const ModelConfig& config, int64_t layer, int64_t prompt_len) {
  return ModelConfig::IsWindowed(layer) ? std::min(prompt_len, config.window) : prompt_len;
}

KvHeader KvHeaderToWire(const KvHandoffHeader& h) {
  KvHeader w;
  w.set_request_id(h.request_id);
  w.set_model_fingerprint(h.layout.model_fingerprint);
  w.set_dtype(h.layout.dtype == KvDtype::kBF16 ? internal::v1::KV_DTYPE_BF16 : internal::v1::KV_DTYPE_F32);
  w.set_prompt_len(static_cast<uint64_t>(h.prompt_len));
  *w.mutable_sampling() = SamplingToProto(h.sampling);
  w.set_n_layers(static_cast<uint32_t>(h.layout.n_layers));
  w.set_window(static_cast<uint32_t>(h.layout.window));
  w.set_n_kv_heads(static_cast<uint32_t>(h.layout.n_kv_heads));
  w.set_head_dim(static_cast<uint32_t>(h.layout.head_dim));
  w.set_total_bytes(static_cast<uint64_t>(h.total_bytes));
  return w;
}

KvHandoffHeader KvHeaderFromWire(const KvHeader& w) {
  KvHandoffHeader h;
  h.request_id = w.request_id();
  h.layout.model_fingerprint = w.model_fingerprint();
  h.layout.n_layers = w.n_layers();
  h.layout.window = w.window();
  h.layout.n_kv_heads = w.n_kv_heads();
  h.layout.head_dim = w.head_dim();
  h.layout.dtype = w.dtype() == internal::v1::KV_DTYPE_BF16 ? KvDtype::kBF16 : KvDtype::kF32;
  h.prompt_len = static_cast<int64_t>(w.prompt_len());
  h.sampling = SamplingFromProto(w.sampling());
  h.total_bytes = static_cast<int64_t>(w.total_bytes());
  return h;
}

KvChunkEncoder::KvChunkEncoder(const ModelConfig& config, KvHeader header, int64_t max_chunk_bytes)
    : config_(config), header_(std::move(header)), max_chunk_bytes_(max_chunk_bytes) {
  header_.set_n_layers(config.n_layers);
  header_.set_window(config.window);
  header_.set_n_kv_heads(config.n_kv_heads);
  header_.set_head_dim(config.head_dim);
  const int64_t elem = ElemBytes(header_.dtype());
  int64_t chunks = 0, total = 0;
  for (int64_t l = 0; l < config.n_layers; ++l) {
    const int64_t bytes = LayerBytes(config, l, header_.prompt_len(), elem);
    chunks += 2 * ((bytes + max_chunk_bytes - 1) / max_chunk_bytes);
    total += 2 * bytes;
  }
  header_.set_n_chunks(static_cast<uint32_t>(chunks));
  header_.set_total_bytes(total);
}

KvChunk KvChunkEncoder::Header() const {
  KvChunk c;
  c.set_seq(0);
  *c.mutable_header() = header_;
  const std::string bytes = Deterministic(header_);
  c.set_crc32c(Crc32c(bytes.data(), bytes.size()));
  return c;
}

absl::StatusOr<std::vector<KvChunk>> KvChunkEncoder::Layer(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  if (layer != next_layer_) {
    return absl::InvalidArgumentError(absl::StrCat("hand-off layer ", layer, " sent, expected ", next_layer_));
  }
  const int64_t rows = HandoffRows(config_, layer, header_.prompt_len());
  std::vector<KvChunk> out;
  int tensor_index = 0;
  for (const at::Tensor& t : {k, v}) {
    if (t.dim() != 3 || t.size(0) != rows || t.size(1) != config_.n_kv_heads || t.size(2) != config_.head_dim ||
        t.scalar_type() != ScalarOf(header_.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat("hand-off layer ", layer, ": tensor ", c10::str(t.sizes()), " ",
                                                     c10::toString(t.scalar_type()), ", expected [", rows, ", ",
                                                     config_.n_kv_heads, ", ", config_.head_dim, "]"));
    }
    // A CUDA LibTorch's K/V: the checksum (and a gRPC payload) need host
    // bytes. The NCCL transport stages them back to the device; sending
    // from the tensor's memory would skip both copies.
    const at::Tensor c = (t.is_cuda() ? t.cpu() : t).contiguous();
    const auto* base = static_cast<const char*>(c.data_ptr());
    const int64_t bytes = c.nbytes();
    for (int64_t off = 0; off < bytes; off += max_chunk_bytes_) {
      const int64_t n = std::min(max_chunk_bytes_, bytes - off);
      KvChunk chunk;
      chunk.set_seq(next_seq_++);
      auto* d = chunk.mutable_data();
      d->set_layer(static_cast<uint32_t>(layer));
      d->set_tensor(tensor_index);
      d->set_offset_bytes(off);
      d->set_payload(base + off, n);
      chunk.set_crc32c(Crc32c(base + off, n));
      out.push_back(std::move(chunk));
    }
    ++tensor_index;
  }
  ++next_layer_;
  return out;
}

absl::StatusOr<KvChunk> KvChunkEncoder::Commit(uint32_t first_token) {
  if (next_layer_ != config_.n_layers) {
    return absl::FailedPreconditionError(absl::StrCat("hand-off commit after ", next_layer_, " of ",
                                                      config_.n_layers, " layers"));
  }
  KvChunk c;
  c.set_seq(next_seq_++);
  c.mutable_commit()->set_first_token(first_token);
  const std::string bytes = Deterministic(c.commit());
  c.set_crc32c(Crc32c(bytes.data(), bytes.size()));
  return c;
}

KvChunkDecoder::KvChunkDecoder(const ModelConfig& config, KvReceiveLimits limits)
    : config_(config), limits_(std::move(limits)) {}

absl::Status KvChunkDecoder::Accept(const KvChunk& chunk) {
  if (chunk.seq() != next_seq_) {
    if (chunk.seq() < next_seq_) return Reject(absl::StrCat("duplicate chunk ", chunk.seq()));
    return Reject(absl::StrCat("chunk ", chunk.seq(), " out of order, expected ", next_seq_));
  }
  if (committed_) return Reject(absl::StrCat("chunk ", chunk.seq(), " after the commit"));
  if (!has_header_) {
    RETURN_IF_ERROR(AcceptHeader(chunk));
  } else if (chunk.seq() == header_.n_chunks() + 1) {
    RETURN_IF_ERROR(AcceptCommit(chunk));
  } else {
    RETURN_IF_ERROR(AcceptData(chunk));
  }
  ++next_seq_;
  return absl::OkStatus();
}

absl::Status KvChunkDecoder::AcceptHeader(const KvChunk& chunk) {
  if (chunk.body_case() != KvChunk::kHeader) return Reject("the first chunk is not a header");
  const KvHeader& h = chunk.header();
  const std::string bytes = Deterministic(h);
  if (Crc32c(bytes.data(), bytes.size()) != chunk.crc32c()) return Reject("header fails its checksum");
  if (h.model_fingerprint() != limits_.model_fingerprint) {
    // The sender's string is quoted briefly: it is not bounded by anything
    // but the message size.
    const std::string& fp = h.model_fingerprint();
    return Reject(absl::StrCat("model fingerprint ", fp.substr(0, 80), fp.size() > 80 ? "..." : "",
                               " differs from this worker's ", limits_.model_fingerprint));
  }
  if (h.n_layers() != config_.n_layers || h.window() != config_.window || h.n_kv_heads() != config_.n_kv_heads ||
      h.head_dim() != config_.head_dim) {
    return Reject(absl::StrCat("model shape (layers ", h.n_layers(), ", window ", h.window(), ", kv heads ",
                               h.n_kv_heads(), ", head dim ", h.head_dim(), ") differs from this worker's (",
                               config_.n_layers, ", ", config_.window, ", ", config_.n_kv_heads, ", ",
                               config_.head_dim, ")"));
  }
  elem_bytes_ = ElemBytes(h.dtype());
  if (elem_bytes_ == 0) return Reject(absl::StrCat("unknown dtype ", h.dtype()));
  const int64_t T = static_cast<int64_t>(h.prompt_len());
  if (T < 1 || T > limits_.max_prompt_len) {
    return Reject(absl::StrCat("prompt_len ", T, " outside [1, ", limits_.max_prompt_len, "]"));
  }
  int64_t total = 0, min_chunks = 0;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const int64_t b = LayerBytes(config_, l, T, elem_bytes_);
    total += 2 * b;
    min_chunks += 2 * ((b + limits_.max_chunk_bytes - 1) / limits_.max_chunk_bytes);
  }
  if (static_cast<int64_t>(h.total_bytes()) != total) {
    return Reject(absl::StrCat("header declares ", h.total_bytes(), " bytes, a ", T, "-token prompt has ", total));
  }
  if (total > limits_.max_total_bytes) {
    return Reject(absl::StrCat(total, " bytes exceed this worker's limit of ", limits_.max_total_bytes));
  }
  if (static_cast<int64_t>(h.n_chunks()) < min_chunks || static_cast<int64_t>(h.n_chunks()) > total) {
    return Reject(absl::StrCat("header declares ", h.n_chunks(), " chunks, expected between ", min_chunks, " and ",
                               total));
  }
  header_ = h;
  has_header_ = true;
  return absl::OkStatus();
}

absl::Status KvChunkDecoder::AcceptData(const KvChunk& chunk) {
  if (chunk.body_case() != KvChunk::kData) return Reject(absl::StrCat("chunk ", chunk.seq(), " is not data"));
  if (chunk.seq() > header_.n_chunks()) {
    return Reject(absl::StrCat("chunk ", chunk.seq(), " beyond the declared ", header_.n_chunks()));
  }
  const auto& d = chunk.data();
  const std::string& p = d.payload();
  if (Crc32c(p.data(), p.size()) != chunk.crc32c()) {
    return Reject(absl::StrCat("chunk ", chunk.seq(), " fails its checksum"));
  }
  if (layer_ >= config_.n_layers) return Reject(absl::StrCat("chunk ", chunk.seq(), " after the last layer"));
  if (d.layer() != layer_ || d.tensor() != tensor_ || static_cast<int64_t>(d.offset_bytes()) != offset_) {
    return Reject(absl::StrCat("chunk ", chunk.seq(), " carries layer ", d.layer(), " tensor ", d.tensor(),
                               " offset ", d.offset_bytes(), ", expected layer ", layer_, " tensor ", tensor_,
                               " offset ", offset_));
  }
  const int64_t rows = HandoffRows(config_, layer_, header_.prompt_len());
  const int64_t bytes = rows * config_.n_kv_heads * config_.head_dim * elem_bytes_;
  if (p.empty() || static_cast<int64_t>(p.size()) > limits_.max_chunk_bytes ||
      offset_ + static_cast<int64_t>(p.size()) > bytes) {
    return Reject(absl::StrCat("chunk ", chunk.seq(), " has ", p.size(), " bytes at offset ", offset_,
                               " of a ", bytes, "-byte tensor (limit ", limits_.max_chunk_bytes, " per chunk)"));
  }
  std::vector<at::Tensor>& dst = tensor_ == 0 ? k_ : v_;
  if (offset_ == 0) {
    dst.push_back(at::empty({rows, config_.n_kv_heads, config_.head_dim}, ScalarOf(header_.dtype())));
  }
  std::memcpy(static_cast<char*>(dst.back().data_ptr()) + offset_, p.data(), p.size());
  offset_ += static_cast<int64_t>(p.size());
  received_bytes_ += static_cast<int64_t>(p.size());
  if (offset_ == bytes) {
    offset_ = 0;
    if (++tensor_ == 2) {
      tensor_ = 0;
      ++layer_;
    }
  }
  return absl::OkStatus();
}

absl::Status KvChunkDecoder::AcceptCommit(const KvChunk& chunk) {
  if (chunk.body_case() != KvChunk::kCommit) {
    return Reject(absl::StrCat("chunk ", chunk.seq(), " should be the commit"));
  }
  const std::string bytes = Deterministic(chunk.commit());
  if (Crc32c(bytes.data(), bytes.size()) != chunk.crc32c()) return Reject("commit fails its checksum");
  if (layer_ != config_.n_layers) {
    return Reject(absl::StrCat("commit after ", received_bytes_, " of ", header_.total_bytes(), " bytes"));
  }
  if (chunk.commit().first_token() >= config_.vocab_size) {
    return Reject(absl::StrCat("first_token ", chunk.commit().first_token(), " >= vocab_size ",
                               config_.vocab_size));
  }
  first_token_ = chunk.commit().first_token();
  committed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<KvHandoffState> KvChunkDecoder::Finish() {
  if (!has_header_) return Reject("no header received");
  if (layer_ != config_.n_layers || next_seq_ != header_.n_chunks() + 2 || !committed_) {
    return Reject(absl::StrCat("truncated: ", next_seq_ == 0 ? 0 : next_seq_ - 1, " of ", header_.n_chunks(),
                               " data chunks, ", received_bytes_, " of ", header_.total_bytes(), " bytes",
                               committed_ ? "" : ", no commit"));
  }
  KvHandoffState s;
  s.prompt_len = static_cast<int64_t>(header_.prompt_len());
  s.k = std::move(k_);
  s.v = std::move(v_);
  return s;
}

}  // namespace pdserve

// libFuzzer target: the KV hand-off wire format and the receiving state
// machine (KvChunkDecoder), with chunks in any order.
//
// The model is configs/tiny.json's shape (4 layers, window 8, 2 KV heads of
// 16). The first input byte picks the mode:
//   even: raw. The rest is a sequence of records [u16 little-endian length]
//         [serialised pdserve.internal.v1.KvChunk]; bit 1 of the first byte
//         recomputes each chunk's CRC-32C and bit 2 sets the header's model
//         fingerprint to the receiver's, so the fuzzer gets past both checks.
//   odd:  structured. A valid stream is encoded (prompt length, dtype and
//         chunk size from the next 3 bytes), then each following 3-byte group
//         edits it: swap, drop, duplicate, corrupt a payload (with or without
//         a fixed CRC), renumber, truncate, or move a chunk to another
//         layer/tensor/offset.
// Every chunk goes to Accept() until one is rejected, then Finish() runs.
// Properties: every rejection is FailedPrecondition with a bounded message;
// an accepted hand-off has one K and one V per layer of exactly
// [HandoffRows, n_kv_heads, head_dim] in the header's dtype, and
// received_bytes equals the header's total_bytes.
//
// With PDSERVE_KV_FUZZ_WRITE_SEEDS=DIR in the environment the binary writes
// raw-mode seeds (valid streams) into DIR and exits.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/handoff/crc32c.h"
#include "common/handoff/kv_wire.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace {

using pdserve::internal::v1::KvChunk;

constexpr char kFingerprint[] = "fp-fuzz";
constexpr int64_t kReceiverChunkLimit = 256;

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "kv_wire_fuzzer: %s: %.300s\n", what, detail.c_str());
  std::abort();
}

const pdserve::ModelConfig& Config() {
  static const pdserve::ModelConfig config = [] {
    absl::StatusOr<pdserve::ModelConfig> c = pdserve::ParseModelConfig(R"({
      "name": "tiny", "vocab_size": 300, "d_model": 64, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2,
      "head_dim": 16, "window": 8, "n_experts": 8, "top_k": 2, "n_shared_experts": 1, "expert_hidden": 96,
      "rope_identity_pairs_global": 2, "max_context": 4096})");
    if (!c.ok()) Fail("bad fixed config", c.status().ToString());
    return *c;
  }();
  return config;
}

pdserve::KvReceiveLimits Limits() {
  pdserve::KvReceiveLimits l;
  l.model_fingerprint = kFingerprint;
  l.max_prompt_len = 64;
  l.max_total_bytes = 1 << 20;
  l.max_chunk_bytes = kReceiverChunkLimit;
  return l;
}

std::string Deterministic(const google::protobuf::MessageLite& m) {
  std::string out;
  google::protobuf::io::StringOutputStream raw(&out);
  google::protobuf::io::CodedOutputStream coded(&raw);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

void FixCrc(KvChunk* c) {
  std::string bytes;
  switch (c->body_case()) {
    case KvChunk::kHeader: bytes = Deterministic(c->header()); break;
    case KvChunk::kCommit: bytes = Deterministic(c->commit()); break;
    case KvChunk::kData: bytes = c->data().payload(); break;
    default: return;
  }
  c->set_crc32c(pdserve::Crc32c(bytes.data(), bytes.size()));
}

// A valid stream for a `prompt_len`-token prompt.
std::vector<KvChunk> ValidStream(int64_t prompt_len, pdserve::internal::v1::KvDtype dtype, int64_t chunk_bytes) {
  const pdserve::ModelConfig& c = Config();
  pdserve::internal::v1::KvHeader h;
  h.set_request_id("req-fuzz");
  h.set_model_fingerprint(kFingerprint);
  h.set_dtype(dtype);
  h.set_prompt_len(prompt_len);
  h.mutable_sampling()->set_max_new_tokens(4);
  pdserve::KvChunkEncoder enc(c, h, chunk_bytes);
  std::vector<KvChunk> out{enc.Header()};
  const auto st = dtype == pdserve::internal::v1::KV_DTYPE_BF16 ? at::kBFloat16 : at::kFloat;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const int64_t rows = pdserve::HandoffRows(c, l, prompt_len);
    const at::Tensor k = at::arange(rows * c.n_kv_heads * c.head_dim, at::kFloat).view({rows, c.n_kv_heads, c.head_dim});
    auto chunks = enc.Layer(l, k.to(st), (-k).to(st));
    if (!chunks.ok()) Fail("encoder refused a valid layer", chunks.status().ToString());
    out.insert(out.end(), chunks->begin(), chunks->end());
  }
  auto commit = enc.Commit(42);
  if (!commit.ok()) Fail("encoder refused the commit", commit.status().ToString());
  out.push_back(*commit);
  return out;
}

void Feed(const std::vector<KvChunk>& chunks) {
  const pdserve::ModelConfig& c = Config();
  pdserve::KvChunkDecoder dec(c, Limits());
  for (const KvChunk& chunk : chunks) {
    absl::Status s = dec.Accept(chunk);
    if (!s.ok()) {
      if (s.code() != absl::StatusCode::kFailedPrecondition) Fail("unexpected code", s.ToString());
      if (s.message().size() > 600) Fail("unbounded error message", std::string(s.message()));
      return;
    }
  }
  absl::StatusOr<pdserve::KvHandoffState> state = dec.Finish();
  if (!state.ok()) {
    if (state.status().code() != absl::StatusCode::kFailedPrecondition) Fail("unexpected code", "");
    return;
  }
  const auto& h = dec.header();
  if (state->prompt_len != static_cast<int64_t>(h.prompt_len())) Fail("prompt_len differs from the header", "");
  if (static_cast<int64_t>(state->k.size()) != c.n_layers || state->v.size() != state->k.size()) {
    Fail("wrong number of layers", "");
  }
  const auto want = h.dtype() == pdserve::internal::v1::KV_DTYPE_BF16 ? at::kBFloat16 : at::kFloat;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::vector<int64_t> shape{pdserve::HandoffRows(c, l, state->prompt_len), c.n_kv_heads, c.head_dim};
    for (const at::Tensor* t : {&state->k[l], &state->v[l]}) {
      if (t->sizes().vec() != shape || t->scalar_type() != want) Fail("accepted a tensor of the wrong shape", "");
    }
  }
  if (dec.received_bytes() != static_cast<int64_t>(h.total_bytes()) || state->Bytes() != dec.received_bytes()) {
    Fail("received bytes differ from the header's total", "");
  }
  if (dec.first_token() >= c.vocab_size) Fail("accepted a first token beyond vocab_size", "");
}

void RawMode(uint8_t flags, const uint8_t* data, size_t size) {
  std::vector<KvChunk> chunks;
  size_t pos = 0;
  while (pos + 2 <= size && chunks.size() < 4096) {
    const size_t len = std::min<size_t>(data[pos] | (size_t{data[pos + 1]} << 8), size - pos - 2);
    KvChunk c;
    if (c.ParseFromArray(data + pos + 2, static_cast<int>(len))) {
      if ((flags & 4) && c.has_header()) c.mutable_header()->set_model_fingerprint(kFingerprint);
      if (flags & 2) FixCrc(&c);
      chunks.push_back(std::move(c));
    }
    pos += 2 + len;
  }
  Feed(chunks);
}

void StructuredMode(const uint8_t* data, size_t size) {
  if (size < 3) return;
  const int64_t prompt_len = 1 + data[0] % 24;
  const auto dtype = static_cast<pdserve::internal::v1::KvDtype>(1 + data[1] % 2);
  const int64_t chunk_bytes = 16 + (data[2] % 61) * 4;  // 16..256
  std::vector<KvChunk> chunks = ValidStream(prompt_len, dtype, chunk_bytes);
  for (size_t p = 3; p + 3 <= size && !chunks.empty(); p += 3) {
    const uint8_t op = data[p] % 8;
    const size_t i = data[p + 1] % chunks.size(), j = data[p + 2] % chunks.size();
    switch (op) {
      case 0: std::swap(chunks[i], chunks[j]); break;
      case 1: chunks.erase(chunks.begin() + static_cast<std::ptrdiff_t>(i)); break;
      case 2: chunks.insert(chunks.begin() + static_cast<std::ptrdiff_t>(j), chunks[i]); break;
      case 3:
      case 4:
        if (chunks[i].has_data() && !chunks[i].data().payload().empty()) {
          std::string* payload = chunks[i].mutable_data()->mutable_payload();
          (*payload)[j % payload->size()] ^= static_cast<char>(1 + data[p + 2]);
          if (op == 4) FixCrc(&chunks[i]);
        }
        break;
      case 5: chunks[i].set_seq(static_cast<uint32_t>(j)); break;
      case 6: chunks.resize(i); break;
      default:
        if (chunks[i].has_data()) {
          auto* d = chunks[i].mutable_data();
          switch (data[p + 2] % 4) {
            case 0: d->set_layer(d->layer() + 1); break;
            case 1: d->set_tensor(d->tensor() ^ 1); break;
            case 2: d->set_offset_bytes(d->offset_bytes() + data[p + 2]); break;
            default: d->mutable_payload()->append(data[p + 2] % 8 + 1, 'x'); FixCrc(&chunks[i]); break;
          }
        } else if (chunks[i].has_header()) {
          auto* h = chunks[i].mutable_header();
          switch (data[p + 2] % 4) {
            case 0: h->set_prompt_len(h->prompt_len() + 1); break;
            case 1: h->set_n_chunks(h->n_chunks() - 1); break;
            case 2: h->set_total_bytes(h->total_bytes() * 2); break;
            default: h->set_dtype(static_cast<pdserve::internal::v1::KvDtype>(data[p + 2] % 4)); break;
          }
          if (data[p + 2] & 0x80) FixCrc(&chunks[i]);
        } else if (chunks[i].has_commit()) {
          chunks[i].mutable_commit()->set_first_token(data[p + 2] * 7u);
          FixCrc(&chunks[i]);
        }
        break;
    }
  }
  Feed(chunks);
}

void WriteSeeds(const std::string& dir) {
  int n = 0;
  for (int64_t prompt_len : {1, 5, 9, 13}) {
    for (auto dtype : {pdserve::internal::v1::KV_DTYPE_F32, pdserve::internal::v1::KV_DTYPE_BF16}) {
      std::string out(1, '\0');  // raw mode, CRCs as written
      for (const KvChunk& c : ValidStream(prompt_len, dtype, prompt_len == 13 ? 64 : 256)) {
        const std::string b = c.SerializeAsString();
        out.push_back(static_cast<char>(b.size() & 0xFF));
        out.push_back(static_cast<char>(b.size() >> 8));
        out += b;
      }
      std::ofstream(dir + "/valid_" + std::to_string(n++), std::ios::binary) << out;
      // The stream must be accepted as written.
      pdserve::KvChunkDecoder dec(Config(), Limits());
      for (const KvChunk& c : ValidStream(prompt_len, dtype, prompt_len == 13 ? 64 : 256)) {
        if (absl::Status s = dec.Accept(c); !s.ok()) Fail("valid stream rejected", s.ToString());
      }
      if (!dec.Finish().ok()) Fail("valid stream does not finish", "");
    }
  }
  std::fprintf(stderr, "wrote %d seeds to %s\n", n, dir.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  (void)Config();
  if (const char* dir = std::getenv("PDSERVE_KV_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) {
    StructuredMode(data + 1, size - 1);
  } else {
    RawMode(data[0], data + 1, size - 1);
  }
  return 0;
}

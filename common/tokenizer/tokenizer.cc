#include "common/tokenizer/tokenizer.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/tokenizer/byte_tokenizer.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const ModelConfig& config,
                                                         const std::string& model_dir) {
  switch (config.tokenizer) {
    case TokenizerType::kByte: {
      absl::StatusOr<std::unique_ptr<ByteTokenizer>> tok = ByteTokenizer::Create(config.vocab_size);
      if (!tok.ok()) return tok.status();
      return std::unique_ptr<Tokenizer>(std::move(tok).value());
    }
    case TokenizerType::kChar:
      return absl::UnimplementedError(
          "char tokenizer is not implemented yet; a later issue adds it behind the Tokenizer "
          "interface");
    case TokenizerType::kBpe:
      return absl::UnimplementedError(
          "BPE tokenizer is not implemented yet; a later issue adds LLaMA-3 BPE behind the "
          "Tokenizer interface");
  }
  // Only reachable with an enum value cast from an out-of-range integer.
  return absl::InvalidArgumentError("unknown tokenizer type");
}

namespace {

// Serves ids without text: Encode fails with the reason, tokens decode to "".
class IdsOnlyTokenizer final : public Tokenizer {
 public:
  IdsOnlyTokenizer(int64_t vocab_size, std::string reason) : vocab_size_(vocab_size), reason_(std::move(reason)) {}
  absl::StatusOr<std::vector<uint32_t>> Encode(absl::string_view) const override {
    return absl::UnimplementedError(reason_);
  }
  std::string DecodeToken(uint32_t) const override { return ""; }
  int64_t vocab_size() const override { return vocab_size_; }

 private:
  int64_t vocab_size_;
  std::string reason_;
};

}  // namespace

std::unique_ptr<Tokenizer> MakeIdsOnlyTokenizer(int64_t vocab_size, std::string reason) {
  return std::make_unique<IdsOnlyTokenizer>(vocab_size, std::move(reason));
}

}  // namespace pdserve

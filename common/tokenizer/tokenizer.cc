#include "common/tokenizer/tokenizer.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/bpe_tokenizer.h"
#include "common/tokenizer/byte_tokenizer.h"
#include "common/tokenizer/char_tokenizer.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const ModelConfig& config,
                                                         const std::string& model_dir) {
  switch (config.tokenizer) {
    case TokenizerType::kByte: {
      absl::StatusOr<std::unique_ptr<ByteTokenizer>> tok = ByteTokenizer::Create(config.vocab_size);
      if (!tok.ok()) return tok.status();
      return std::unique_ptr<Tokenizer>(std::move(tok).value());
    }
    case TokenizerType::kChar: {
      absl::StatusOr<std::unique_ptr<CharTokenizer>> tok = CharTokenizer::Create(config.vocab_size);
      if (!tok.ok()) return tok.status();
      return std::unique_ptr<Tokenizer>(std::move(tok).value());
    }
    case TokenizerType::kBpe: {
      if (config.tokenizer_file.empty()) {
        return absl::InvalidArgumentError("config field 'tokenizer.file' is required when tokenizer.type is 'bpe'");
      }
      // The file is relative to the model directory (docs/model.md).
      const std::string path =
          model_dir.empty() ? config.tokenizer_file : absl::StrCat(model_dir, "/", config.tokenizer_file);
      absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromFile(path, config.vocab_size);
      if (absl::IsNotFound(tok.status())) {
        return absl::NotFoundError(absl::StrCat(tok.status().message(),
                                                " (for LLaMA-3, scripts/fetch_tokenizer.sh caches tokenizer.json in "
                                                ".cache/tokenizers/llama3/; copy it into the model directory)"));
      }
      if (!tok.ok()) return tok.status();
      return std::unique_ptr<Tokenizer>(std::move(tok).value());
    }
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

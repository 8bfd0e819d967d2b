// Tokenizer: the text <-> id mapping a model config selects (docs/model.md,
// "tokenizer"). Workers and clients only see this interface, so the byte,
// char and BPE variants can be swapped without touching callers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/config.h"

namespace pdserve {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Maps UTF-8 (or arbitrary byte) text to token ids. Returns an error status
  // (InvalidArgument) when the text cannot be represented in the vocabulary.
  // A BPE tokenizer turns text that spells one of its special tokens
  // ("<|eot_id|>", "<|start|>") into that token's id; for those tokens as
  // plain text, use BpeTokenizer::Encode(text, SpecialTokens::kAsText).
  virtual absl::StatusOr<std::vector<uint32_t>> Encode(absl::string_view text) const = 0;

  // The raw bytes of one token. A multi-byte character may be split across
  // tokens, so the result can be a partial UTF-8 sequence; use
  // IncrementalDetokenizer to turn a token stream into valid text. Never
  // fails: ids with no text (out of range, special) decode to "".
  virtual std::string DecodeToken(uint32_t id) const = 0;

  // Number of ids the model's output head scores. Never fails.
  virtual int64_t vocab_size() const = 0;
};

// Builds the tokenizer `config.tokenizer` names; `model_dir` is where
// `config.tokenizer_file` lives (BPE). Returns InvalidArgument when the config
// does not fit the tokenizer (e.g. vocab_size too small), NotFound (with the
// path) when the BPE file is missing, and the BPE loader's DataLoss /
// InvalidArgument for a malformed file.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const ModelConfig& config,
                                                         const std::string& model_dir);

// A stand-in when the model's tokenizer is unavailable: token-id prompts
// still work, text prompts fail with Unimplemented(`reason`), and generated
// tokens carry no text.
std::unique_ptr<Tokenizer> MakeIdsOnlyTokenizer(int64_t vocab_size, std::string reason);

}  // namespace pdserve

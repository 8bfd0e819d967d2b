// CharTokenizer: the "char" tokenizer of docs/model.md. One id per Unicode
// code point, `code point mod vocab_size`.
//
// Lossy by design: code points at or above vocab_size share ids with smaller
// ones (with vocab 128000, U+1F600 "😀" encodes to 512), so decode cannot
// recover them. The decode rule is fixed: id N decodes to the UTF-8 of code
// point N when N < vocab_size and N is a Unicode scalar value (at most
// U+10FFFF and not a surrogate U+D800-U+DFFF); any other id decodes to "".
// Text is therefore reproduced exactly iff every code point is below
// vocab_size.
//
// Invalid UTF-8 input is rejected (InvalidArgument), not replaced: a silent
// U+FFFD would change the prompt the model sees without telling the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/tokenizer.h"

namespace pdserve {

class CharTokenizer : public Tokenizer {
 public:
  // Returns InvalidArgument "char tokenizer needs 1 <= vocab_size <= 4294967296,
  // got N" when ids would not fit the vocabulary or uint32_t.
  static absl::StatusOr<std::unique_ptr<CharTokenizer>> Create(int64_t vocab_size);

  // One id per code point, `code point mod vocab_size`. Returns
  // InvalidArgument "text is not valid UTF-8 at byte N" (N the offset of the
  // first bad byte) for malformed input, overlong forms, surrogates and code
  // points past U+10FFFF.
  absl::StatusOr<std::vector<uint32_t>> Encode(absl::string_view text) const override;
  // The UTF-8 of code point `id` (the rule in the file comment); "" for ids
  // at or above vocab_size, surrogates and ids past U+10FFFF. Never fails.
  std::string DecodeToken(uint32_t id) const override;
  int64_t vocab_size() const override { return vocab_size_; }

 private:
  // Private so that every instance went through Create's check.
  explicit CharTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {}

  int64_t vocab_size_;
};

}  // namespace pdserve

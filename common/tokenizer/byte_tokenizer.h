// ByteTokenizer: the "byte" tokenizer of docs/model.md. Ids 0-255 are the
// bytes of the UTF-8 text; ids >= 256 exist in the vocabulary (the model may
// sample them) but decode to no text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/tokenizer.h"

namespace pdserve {

class ByteTokenizer : public Tokenizer {
 public:
  // Returns InvalidArgument "byte tokenizer needs vocab_size >= 256, got N"
  // when the vocabulary cannot hold every byte.
  static absl::StatusOr<std::unique_ptr<ByteTokenizer>> Create(int64_t vocab_size);

  // One id per byte; never fails (every byte has an id).
  absl::StatusOr<std::vector<uint32_t>> Encode(absl::string_view text) const override;
  // The single byte for ids < 256, "" otherwise.
  std::string DecodeToken(uint32_t id) const override;
  int64_t vocab_size() const override { return vocab_size_; }

 private:
  // Private so that every instance went through Create's check.
  explicit ByteTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {}

  int64_t vocab_size_;
};

}  // namespace pdserve

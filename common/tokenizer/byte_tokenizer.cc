#include "common/tokenizer/byte_tokenizer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pdserve {

namespace {
constexpr int64_t kNumBytes = 256;
}  // namespace

absl::StatusOr<std::unique_ptr<ByteTokenizer>> ByteTokenizer::Create(int64_t vocab_size) {
  if (vocab_size < kNumBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte tokenizer needs vocab_size >= 256, got ", vocab_size));
  }
  return std::unique_ptr<ByteTokenizer>(new ByteTokenizer(vocab_size));
}

absl::StatusOr<std::vector<uint32_t>> ByteTokenizer::Encode(absl::string_view text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size());
  // Through unsigned char: a plain char may be signed, and 0x80-0xFF must map
  // to ids 128-255, not to huge wrapped values.
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::DecodeToken(uint32_t id) const {
  if (id >= kNumBytes) return std::string();
  return std::string(1, static_cast<char>(id));
}

}  // namespace pdserve

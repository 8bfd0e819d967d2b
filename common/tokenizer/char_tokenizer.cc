#include "common/tokenizer/char_tokenizer.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"

namespace pdserve {

namespace {

constexpr int64_t kMaxVocab = int64_t{1} << 32;  // ids are uint32_t
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

bool IsScalarValue(uint32_t cp) { return cp <= kMaxCodePoint && !(cp >= 0xD800 && cp <= 0xDFFF); }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CharTokenizer>> CharTokenizer::Create(int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > kMaxVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("char tokenizer needs 1 <= vocab_size <= ", kMaxVocab, ", got ", vocab_size));
  }
  return std::unique_ptr<CharTokenizer>(new CharTokenizer(vocab_size));
}

absl::StatusOr<std::vector<uint32_t>> CharTokenizer::Encode(absl::string_view text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp = 0;
    const size_t len = DecodeUtf8(text, pos, &cp);
    if (len == 0) return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", pos));
    pos += len;
    ids.push_back(static_cast<uint32_t>(cp % vocab_size_));
  }
  return ids;
}

std::string CharTokenizer::DecodeToken(uint32_t id) const {
  std::string out;
  if (id < vocab_size_ && IsScalarValue(id)) AppendUtf8(id, &out);
  return out;
}

}  // namespace pdserve

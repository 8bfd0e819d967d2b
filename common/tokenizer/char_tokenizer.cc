#include "common/tokenizer/char_tokenizer.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pdserve {

namespace {

constexpr int64_t kMaxVocab = int64_t{1} << 32;  // ids are uint32_t
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

bool IsScalarValue(uint32_t cp) { return cp <= kMaxCodePoint && !(cp >= 0xD800 && cp <= 0xDFFF); }

// Decodes one well-formed UTF-8 sequence at text[*pos] into *cp and advances
// *pos. Returns false (leaving *pos at the bad sequence) on any malformed,
// overlong, surrogate or out-of-range sequence, per the Unicode table of
// well-formed byte sequences.
bool NextCodePoint(absl::string_view text, size_t* pos, uint32_t* cp) {
  const size_t n = text.size();
  const size_t i = *pos;
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (b0 < 0x80) {
    *cp = b0;
    *pos = i + 1;
    return true;
  }
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return false;
  }
  if (i + len > n) return false;
  uint32_t value = b0 & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return false;
    value = (value << 6) | (b & 0x3F);
  }
  *cp = value;
  *pos = i + len;
  return true;
}

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
    if (!NextCodePoint(text, &pos, &cp)) {
      return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", pos));
    }
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

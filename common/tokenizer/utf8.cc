#include "common/tokenizer/utf8.h"

#include "absl/strings/str_cat.h"

namespace pdserve {

namespace {

// Unicode White_Space (what Rust's char::is_whitespace tests), for added
// tokens' lstrip/rstrip.
bool IsWhiteSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace

size_t DecodeUtf8(absl::string_view text, size_t pos, uint32_t* cp) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (pos + len > text.size()) return 0;
  uint32_t value = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[pos + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    value = (value << 6) | (b & 0x3F);
  }
  *cp = value;
  return len;
}

size_t FirstInvalidUtf8(absl::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path: most prompts are mostly ASCII.
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    uint32_t cp;
    const size_t len = DecodeUtf8(text, pos, &cp);
    if (len == 0) return pos;
    pos += len;
  }
  return absl::string_view::npos;
}

absl::string_view TrimLeadingWhiteSpace(absl::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    uint32_t cp;
    const size_t len = DecodeUtf8(s, pos, &cp);
    if (len == 0 || !IsWhiteSpace(cp)) break;
    pos += len;
  }
  return s.substr(pos);
}

absl::string_view TrimTrailingWhiteSpace(absl::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;  // back up to the lead byte
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    uint32_t cp;
    if (DecodeUtf8(s, start, &cp) != end - start || !IsWhiteSpace(cp)) break;
    end = start;
  }
  return s.substr(0, end);
}

size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  return 2;
}

std::string ClipUtf8(absl::string_view s) {
  if (s.size() <= 60) return std::string(s);
  size_t n = 57;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // whole characters only
  return absl::StrCat(s.substr(0, n), "...");
}

}  // namespace pdserve

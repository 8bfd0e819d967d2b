// UTF-8 helpers for tokenizers: decoding one character, validating text,
// Unicode White_Space trimming and error-message excerpts.
//   DecodeUtf8             one well-formed sequence at a position, or 0
//   FirstInvalidUtf8       offset of the first ill-formed byte, or npos
//   Utf8Length             a sequence's length from its lead byte
//   TrimLeadingWhiteSpace  / TrimTrailingWhiteSpace: Unicode White_Space
//   ClipUtf8               a user string cut to ~60 bytes at a character
//                          boundary, for error messages
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace pdserve {

// Decodes one well-formed UTF-8 sequence at text[pos]; returns its length
// and sets *cp, or 0 when the bytes there are not well formed (Unicode's
// table: no overlongs, surrogates or code points past U+10FFFF).
size_t DecodeUtf8(absl::string_view text, size_t pos, uint32_t* cp);

// Offset of the first byte that is not part of well-formed UTF-8, or npos.
size_t FirstInvalidUtf8(absl::string_view text);

// The length of the sequence `lead` starts (1-4), assuming well-formed text.
size_t Utf8Length(unsigned char lead);

// `s` without leading / trailing Unicode White_Space (what Rust's
// char::is_whitespace tests; added tokens' lstrip/rstrip).
absl::string_view TrimLeadingWhiteSpace(absl::string_view s);
absl::string_view TrimTrailingWhiteSpace(absl::string_view s);

// `s` when at most 60 bytes, else its first <= 57 bytes of whole characters
// and "...".
std::string ClipUtf8(absl::string_view s);

}  // namespace pdserve

// utf8.h: decoding against Unicode's table of well-formed sequences,
// validation offsets, White_Space trimming and error-message excerpts.
#include "common/tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace pdserve {
namespace {

TEST(Utf8Test, DecodesEachLength) {
  uint32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("A", 0, &cp), 1u);
  EXPECT_EQ(cp, 0x41u);
  EXPECT_EQ(DecodeUtf8("\xC3\xA9", 0, &cp), 2u);  // é
  EXPECT_EQ(cp, 0xE9u);
  EXPECT_EQ(DecodeUtf8("x\xE2\x82\xAC", 1, &cp), 3u);  // €
  EXPECT_EQ(cp, 0x20ACu);
  EXPECT_EQ(DecodeUtf8("\xF0\x9F\x98\x80", 0, &cp), 4u);  // U+1F600
  EXPECT_EQ(cp, 0x1F600u);
}

TEST(Utf8Test, RefusesIllFormedSequences) {
  uint32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("\xC0\xAF", 0, &cp), 0u);          // overlong '/'
  EXPECT_EQ(DecodeUtf8("\xE0\x80\xAF", 0, &cp), 0u);      // overlong, 3 bytes
  EXPECT_EQ(DecodeUtf8("\xED\xA0\x80", 0, &cp), 0u);      // surrogate U+D800
  EXPECT_EQ(DecodeUtf8("\xF4\x90\x80\x80", 0, &cp), 0u);  // past U+10FFFF
  EXPECT_EQ(DecodeUtf8("\x80", 0, &cp), 0u);              // lone continuation
  EXPECT_EQ(DecodeUtf8("\xE2\x82", 0, &cp), 0u);          // truncated
}

TEST(Utf8Test, FirstInvalidUtf8GivesTheOffset) {
  EXPECT_EQ(FirstInvalidUtf8("plain ascii"), absl::string_view::npos);
  EXPECT_EQ(FirstInvalidUtf8("caf\xC3\xA9 \xE2\x82\xAC"), absl::string_view::npos);
  EXPECT_EQ(FirstInvalidUtf8("ab\xFF" "cd"), 2u);
  EXPECT_EQ(FirstInvalidUtf8("\xC3\xA9\xE2\x82"), 2u);  // a truncated € after é
  EXPECT_EQ(FirstInvalidUtf8(""), absl::string_view::npos);
}

TEST(Utf8Test, LengthFromLeadByte) {
  EXPECT_EQ(Utf8Length('a'), 1u);
  EXPECT_EQ(Utf8Length(0xC3), 2u);
  EXPECT_EQ(Utf8Length(0xE2), 3u);
  EXPECT_EQ(Utf8Length(0xF0), 4u);
}

TEST(Utf8Test, TrimsUnicodeWhiteSpaceOnly) {
  // U+3000 (ideographic space) and U+00A0 are White_Space; U+200B is not.
  EXPECT_EQ(TrimLeadingWhiteSpace("\xE3\x80\x80\xC2\xA0 \tx y "), "x y ");
  EXPECT_EQ(TrimTrailingWhiteSpace(" x y\n\xE3\x80\x80"), " x y");
  EXPECT_EQ(TrimLeadingWhiteSpace("\xE2\x80\x8Bx"), "\xE2\x80\x8Bx");
  EXPECT_EQ(TrimTrailingWhiteSpace("x\xE2\x80\x8B"), "x\xE2\x80\x8B");
  EXPECT_EQ(TrimLeadingWhiteSpace("   "), "");
  EXPECT_EQ(TrimTrailingWhiteSpace("   "), "");
}

TEST(Utf8Test, ClipKeepsWholeCharacters) {
  EXPECT_EQ(ClipUtf8("short"), "short");
  const std::string sixty(60, 'a');
  EXPECT_EQ(ClipUtf8(sixty), sixty);
  EXPECT_EQ(ClipUtf8(sixty + "b"), std::string(57, 'a') + "...");
  // A 2-byte character across byte 57 is dropped whole, not cut.
  const std::string s = std::string(56, 'a') + "\xC3\xA9" + std::string(10, 'b');
  const std::string clipped = ClipUtf8(s);
  EXPECT_EQ(clipped, std::string(56, 'a') + "...");
  EXPECT_EQ(FirstInvalidUtf8(clipped), absl::string_view::npos);
}

}  // namespace
}  // namespace pdserve

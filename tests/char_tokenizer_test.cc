#include "common/tokenizer/char_tokenizer.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model/config.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"

namespace pdserve {
namespace {

std::unique_ptr<CharTokenizer> MakeChar(int64_t vocab = 128000) {
  absl::StatusOr<std::unique_ptr<CharTokenizer>> tok = CharTokenizer::Create(vocab);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return std::move(tok).value();
}

std::string DecodeAll(const Tokenizer& tok, const std::vector<uint32_t>& ids) {
  std::string out;
  for (const uint32_t id : ids) out += tok.DecodeToken(id);
  return out;
}

TEST(CharTokenizerTest, OneIdPerCodePoint) {
  auto tok = MakeChar();
  // h, é (U+00E9), 你 (U+4F60), 😀 (U+1F600 = 128512 -> 512 mod 128000).
  absl::StatusOr<std::vector<uint32_t>> ids = tok->Encode("h\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<uint32_t>{0x68, 0xE9, 0x4F60, 128512 - 128000}));
  EXPECT_TRUE(tok->Encode("")->empty());
}

TEST(CharTokenizerTest, IdsWrapModuloVocab) {
  auto tok = MakeChar(100);
  EXPECT_EQ(*tok->Encode("hi"), (std::vector<uint32_t>{104 % 100, 105 % 100}));
  auto one = MakeChar(1);
  EXPECT_EQ(*one->Encode("ab\xC3\xA9"), (std::vector<uint32_t>{0, 0, 0}));
}

TEST(CharTokenizerTest, RoundTripsWhenEveryCodePointIsBelowVocab) {
  auto tok = MakeChar();
  const std::string text = "Hello, w\xC3\xB6rld!\n\t\xE4\xBD\xA0\xE5\xA5\xBD \xC3\xA9t\xC3\xA9";
  EXPECT_EQ(DecodeAll(*tok, *tok->Encode(text)), text);
  const std::string nul("a\0b", 3);
  EXPECT_EQ(DecodeAll(*tok, *tok->Encode(nul)), nul);
}

TEST(CharTokenizerTest, DecodeIsLossyAboveVocabByDesign) {
  auto tok = MakeChar();
  // 😀 encodes to 512, which decodes to U+0200 "Ȁ", not back to the emoji.
  absl::StatusOr<std::vector<uint32_t>> ids = tok->Encode("\xF0\x9F\x98\x80");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(DecodeAll(*tok, *ids), "\xC8\x80");
}

TEST(CharTokenizerTest, DecodeRule) {
  auto big = MakeChar(int64_t{1} << 32);
  EXPECT_EQ(big->DecodeToken(0x41), "A");
  EXPECT_EQ(big->DecodeToken(0x10FFFF), "\xF4\x8F\xBF\xBF");
  EXPECT_EQ(big->DecodeToken(0x110000), "");  // past Unicode
  EXPECT_EQ(big->DecodeToken(0xD800), "");    // surrogates are not scalar values
  EXPECT_EQ(big->DecodeToken(0xDFFF), "");
  EXPECT_EQ(big->DecodeToken(0xFFFFFFFFu), "");
  auto small = MakeChar(300);
  EXPECT_EQ(small->DecodeToken(299), "\xC4\xAB");  // U+012B
  EXPECT_EQ(small->DecodeToken(300), "");          // out of range
}

TEST(CharTokenizerTest, InvalidUtf8IsRejectedWithTheOffset) {
  auto tok = MakeChar();
  struct Case {
    std::string text;
    std::string offset;
  };
  const std::vector<Case> cases = {
      {"a\xFF!", "byte 1"},            // never valid
      {"ok\xE4\xBD", "byte 2"},        // truncated at the end
      {"\xE4\xBD!", "byte 0"},         // truncated in the middle
      {"\xC0\xAF", "byte 0"},          // overlong '/'
      {"\xE0\x80\xAF", "byte 0"},      // overlong 3-byte
      {"xy\xED\xA0\x80", "byte 2"},    // UTF-8 encoded surrogate
      {"\xF4\x90\x80\x80", "byte 0"},  // past U+10FFFF
      {"\x80", "byte 0"},              // lone continuation
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<uint32_t>> ids = tok->Encode(c.text);
    ASSERT_FALSE(ids.ok()) << c.offset;
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("not valid UTF-8 at " + c.offset), absl::string_view::npos) << ids.status();
  }
}

TEST(CharTokenizerTest, CreateRejectsBadVocab) {
  for (const int64_t v : {int64_t{0}, int64_t{-5}, (int64_t{1} << 32) + 1}) {
    absl::StatusOr<std::unique_ptr<CharTokenizer>> tok = CharTokenizer::Create(v);
    ASSERT_FALSE(tok.ok()) << v;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(CharTokenizerTest, StreamingDecodeMatchesWholeDecode) {
  auto tok = MakeChar();
  const std::string text = "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x91\x8B";  // café 日本 👋 (wraps)
  const std::vector<uint32_t> ids = *tok->Encode(text);
  IncrementalDetokenizer detok(tok.get());
  std::string streamed;
  for (const uint32_t id : ids) streamed += detok.Push(id);
  streamed += detok.Flush();
  EXPECT_EQ(streamed, DecodeAll(*tok, ids));
}

TEST(CharTokenizerTest, MakeTokenizerBuildsIt) {
  ModelConfig config;
  config.tokenizer = TokenizerType::kChar;
  config.vocab_size = 1000;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = MakeTokenizer(config, "/nonexistent");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 1000);
  EXPECT_EQ(*(*tok)->Encode("\xC3\xA9"), (std::vector<uint32_t>{0xE9}));
}

}  // namespace
}  // namespace pdserve

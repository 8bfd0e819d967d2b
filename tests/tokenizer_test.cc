#include "common/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model/config.h"
#include "common/tokenizer/byte_tokenizer.h"
#include "common/tokenizer/incremental_detokenizer.h"

namespace pdserve {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::unique_ptr<ByteTokenizer> MakeByte(int64_t vocab = 512) {
  absl::StatusOr<std::unique_ptr<ByteTokenizer>> tok = ByteTokenizer::Create(vocab);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return std::move(tok).value();
}

// Feeds every byte of `bytes` as its own token, concatenating the output.
std::string PushAll(IncrementalDetokenizer& detok, const std::string& bytes,
                    std::vector<std::string>* chunks = nullptr) {
  std::string out;
  for (const char c : bytes) {
    std::string chunk = detok.Push(static_cast<unsigned char>(c));
    if (chunks != nullptr) chunks->push_back(chunk);
    out += chunk;
  }
  return out;
}

TEST(ByteTokenizerTest, EncodeIsOneIdPerByteIncludingHighBytes) {
  auto tok = MakeByte();
  // "é" is C3 A9; high bytes must not sign-extend.
  absl::StatusOr<std::vector<uint32_t>> ids = tok->Encode("a\xC3\xA9\xFF");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<uint32_t>{0x61, 0xC3, 0xA9, 0xFF}));
  EXPECT_TRUE(tok->Encode("")->empty());
}

TEST(ByteTokenizerTest, EncodeKeepsEmbeddedNul) {
  auto tok = MakeByte();
  const std::string text("a\0b", 3);
  EXPECT_EQ(*tok->Encode(text), (std::vector<uint32_t>{0x61, 0x00, 0x62}));
}

TEST(ByteTokenizerTest, DecodeRoundTripsEveryByte) {
  auto tok = MakeByte(256);
  for (uint32_t id = 0; id < 256; ++id) {
    const std::string s = tok->DecodeToken(id);
    ASSERT_EQ(s.size(), 1u) << id;
    EXPECT_EQ(static_cast<unsigned char>(s[0]), id);
  }
}

TEST(ByteTokenizerTest, IdsFrom256DecodeToNothing) {
  auto tok = MakeByte(1000);
  EXPECT_EQ(tok->DecodeToken(256), "");
  EXPECT_EQ(tok->DecodeToken(999), "");
  EXPECT_EQ(tok->DecodeToken(4000000000u), "");
}

TEST(ByteTokenizerTest, VocabSizeIsTheConfiguredOne) {
  EXPECT_EQ(MakeByte(256)->vocab_size(), 256);
  EXPECT_EQ(MakeByte(128000)->vocab_size(), 128000);
}

TEST(ByteTokenizerTest, CreateRejectsVocabBelow256) {
  absl::StatusOr<std::unique_ptr<ByteTokenizer>> tok = ByteTokenizer::Create(255);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tok.status().message(), "byte tokenizer needs vocab_size >= 256, got 255");
  EXPECT_FALSE(ByteTokenizer::Create(0).ok());
  EXPECT_FALSE(ByteTokenizer::Create(-1).ok());
}

TEST(MakeTokenizerTest, ByteConfigGivesAByteTokenizer) {
  ModelConfig config;
  config.tokenizer = TokenizerType::kByte;
  config.vocab_size = 300;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = MakeTokenizer(config, "/nonexistent");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 300);
  EXPECT_EQ(*(*tok)->Encode("hi"), (std::vector<uint32_t>{'h', 'i'}));
  EXPECT_EQ((*tok)->DecodeToken(299), "");
}

TEST(MakeTokenizerTest, ByteConfigWithSmallVocabFails) {
  ModelConfig config;
  config.tokenizer = TokenizerType::kByte;
  config.vocab_size = 100;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = MakeTokenizer(config, "");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tok.status().message().find("got 100"), absl::string_view::npos);
}

TEST(MakeTokenizerTest, CharBuildsAndMissingBpeFileIsNotFound) {
  ModelConfig config;
  config.tokenizer = TokenizerType::kChar;
  EXPECT_TRUE(MakeTokenizer(config, "").ok());
  config.tokenizer = TokenizerType::kBpe;
  config.tokenizer_file = "tokenizer.json";
  EXPECT_EQ(MakeTokenizer(config, "/nonexistent").status().code(), absl::StatusCode::kNotFound);
}

TEST(IncrementalDetokenizerTest, AsciiPassesStraightThrough) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  std::vector<std::string> chunks;
  EXPECT_EQ(PushAll(detok, "hi!", &chunks), "hi!");
  EXPECT_EQ(chunks, (std::vector<std::string>{"h", "i", "!"}));
  EXPECT_EQ(detok.Flush(), "");
}

TEST(IncrementalDetokenizerTest, TwoByteCharIsHeldUntilComplete) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  EXPECT_EQ(detok.Push(0xC3), "");
  EXPECT_EQ(detok.Push(0xA9), "\xC3\xA9");  // é
}

TEST(IncrementalDetokenizerTest, ThreeByteCharIsHeldUntilComplete) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  std::vector<std::string> chunks;
  EXPECT_EQ(PushAll(detok, "a\xE2\x82\xAC" "b", &chunks), "a\xE2\x82\xAC" "b");  // a€b
  EXPECT_EQ(chunks, (std::vector<std::string>{"a", "", "", "\xE2\x82\xAC", "b"}));
}

TEST(IncrementalDetokenizerTest, FourByteEmojiIsHeldUntilComplete) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  std::vector<std::string> chunks;
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600
  EXPECT_EQ(PushAll(detok, emoji + emoji, &chunks), emoji + emoji);
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "", "", emoji, "", "", "", emoji}));
  EXPECT_EQ(detok.Flush(), "");
}

TEST(IncrementalDetokenizerTest, IdsWithoutTextDoNotBreakASequence) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  EXPECT_EQ(detok.Push(0xE2), "");
  EXPECT_EQ(detok.Push(300), "");
  EXPECT_EQ(detok.Push(0x82), "");
  EXPECT_EQ(detok.Push(511), "");
  EXPECT_EQ(detok.Push(0xAC), "\xE2\x82\xAC");
}

TEST(IncrementalDetokenizerTest, StrayContinuationByteIsReplacedAtOnce) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  EXPECT_EQ(detok.Push(0x80), kFffd);
  EXPECT_EQ(detok.Push('x'), "x");
}

TEST(IncrementalDetokenizerTest, BytesThatNeverStartACharAreReplacedAtOnce) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  // C0/C1 only make overlong forms; F5-FF lie beyond U+10FFFF.
  for (uint32_t b : {0xC0u, 0xC1u, 0xF5u, 0xFFu}) {
    EXPECT_EQ(detok.Push(b), kFffd) << b;
  }
  EXPECT_EQ(detok.Flush(), "");
}

TEST(IncrementalDetokenizerTest, InterruptedSequenceIsReplacedAndNextByteKept) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  EXPECT_EQ(detok.Push(0xE2), "");
  EXPECT_EQ(detok.Push(0x82), "");
  // 'A' cannot continue the sequence: the prefix becomes one U+FFFD and the
  // 'A' is emitted in the same call, not held.
  EXPECT_EQ(detok.Push('A'), kFffd + "A");
  EXPECT_EQ(detok.Flush(), "");
}

TEST(IncrementalDetokenizerTest, InterruptingLeadByteStartsItsOwnSequence) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  EXPECT_EQ(detok.Push(0xC3), "");
  EXPECT_EQ(detok.Push(0xC3), kFffd);  // first C3 is dead, second may complete
  EXPECT_EQ(detok.Push(0xA9), "\xC3\xA9");
}

TEST(IncrementalDetokenizerTest, OverlongAndSurrogateSecondBytesAreRejectedEarly) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  // E0 80 could only be an overlong form; ED A0 a UTF-16 surrogate; F4 90
  // beyond U+10FFFF. None may be held as a possible prefix.
  EXPECT_EQ(detok.Push(0xE0), "");
  EXPECT_EQ(detok.Push(0x80), kFffd + kFffd);
  EXPECT_EQ(detok.Push(0xED), "");
  EXPECT_EQ(detok.Push(0xA0), kFffd + kFffd);
  EXPECT_EQ(detok.Push(0xF4), "");
  EXPECT_EQ(detok.Push(0x90), kFffd + kFffd);
  EXPECT_EQ(detok.Flush(), "");
}

TEST(IncrementalDetokenizerTest, FlushReplacesIncompleteTailWithOneFffd) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  EXPECT_EQ(PushAll(detok, "ok\xF0\x9F\x98"), "ok");
  EXPECT_EQ(detok.Flush(), kFffd);
  // Flush resets: the stream can continue cleanly.
  EXPECT_EQ(detok.Flush(), "");
  EXPECT_EQ(detok.Push('z'), "z");
}

TEST(IncrementalDetokenizerTest, OutputEqualsWholeTextForValidUtf8) {
  auto tok = MakeByte();
  IncrementalDetokenizer detok(tok.get());
  const std::string text = "na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x8E\x89!";
  // Keep the StatusOr alive: ranging over *Encode() directly would dangle.
  absl::StatusOr<std::vector<uint32_t>> ids = tok->Encode(text);
  ASSERT_TRUE(ids.ok());
  std::string out;
  for (uint32_t id : *ids) out += detok.Push(id);
  out += detok.Flush();
  EXPECT_EQ(out, text);
}

}  // namespace
}  // namespace pdserve

// The gpt-oss tokenizer.json (o200k_harmony) in BpeTokenizer, held to an
// independent implementation: npm gpt-tokenizer's tiktoken port, whose ids
// tests/data/make_gptoss_encodings.mjs wrote to tests/data/gptoss_encodings.jsonl.
// The file is fetched by scripts/fetch_tokenizer.sh (run by scripts/setup.sh)
// into .cache/tokenizers/gptoss/, or named by $PDSERVE_GPTOSS_TOKENIZER_JSON;
// without it the cases skip, as the LLaMA-3 ones do (and scripts/test.sh
// fails a run with such skips).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/tokenizer/bpe_tokenizer.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/gptoss_test_util.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using Special = BpeTokenizer::SpecialTokens;

// gpt-oss's config.json vocab_size: o200k_harmony's 201,088 ids, of which
// the tokenizer.json names 0-200018.
using ::pdserve::testing::kGptOssVocabSize;
constexpr int64_t kTokenizerJsonIds = 200019;

using ::pdserve::testing::GptOssPath;
using ::pdserve::testing::kGptOssMissing;

struct Reference {
  std::string text;
  std::vector<uint32_t> ids;          // special tokens as text
  std::vector<uint32_t> special_ids;  // special tokens parsed
};

std::vector<Reference> ReadReferences() {
  std::vector<Reference> refs;
  std::ifstream in(std::string(PDSERVE_SOURCE_DIR) + "/tests/data/gptoss_encodings.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    Reference ref{j["text"].get<std::string>(), j["ids"].get<std::vector<uint32_t>>(), {}};
    ref.special_ids = j.contains("special_ids") ? j["special_ids"].get<std::vector<uint32_t>>() : ref.ids;
    refs.push_back(std::move(ref));
  }
  return refs;
}

std::vector<uint32_t> EncodeOk(const BpeTokenizer& tok, const std::string& text, Special special) {
  absl::StatusOr<std::vector<uint32_t>> ids = tok.Encode(text, special);
  EXPECT_TRUE(ids.ok()) << ids.status() << " for " << json(text).dump();
  return ids.ok() ? *ids : std::vector<uint32_t>{};
}

std::string DecodeOk(const BpeTokenizer& tok, const std::vector<uint32_t>& ids, bool include_special) {
  absl::StatusOr<std::string> text = tok.Decode(ids, include_special);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

// Encodes every reference string; returns how many differ from `want`'s ids.
int CountMismatches(const BpeTokenizer& tok, const std::vector<Reference>& refs, Special special) {
  int mismatches = 0;
  for (const Reference& ref : refs) {
    const std::vector<uint32_t>& want = special == Special::kAsText ? ref.ids : ref.special_ids;
    const std::vector<uint32_t> got = EncodeOk(tok, ref.text, special);
    if (got != want) {
      ++mismatches;
      ADD_FAILURE() << "encoding differs for " << json(ref.text).dump() << "\n  got  " << json(got).dump()
                    << "\n  want " << json(want).dump();
    }
  }
  return mismatches;
}

class GptOssTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(GptOssPath())) return;
    absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromFile(GptOssPath(), kGptOssVocabSize);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(tok).value().release();
    *refs_ = ReadReferences();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) {
      GTEST_SKIP() << "gpt-oss tokenizer.json not found at " << GptOssPath()
                   << kGptOssMissing;
    }
  }

  static BpeTokenizer* tok_;
  static std::vector<Reference>* refs_;
};

BpeTokenizer* GptOssTokenizerTest::tok_ = nullptr;
std::vector<Reference>* GptOssTokenizerTest::refs_ = new std::vector<Reference>();

TEST_F(GptOssTokenizerTest, SpecialTokensAsTextMatchGptTokenizer) {
  ASSERT_GE(refs_->size(), 400u) << "tests/data/gptoss_encodings.jsonl is missing or short";
  EXPECT_EQ(CountMismatches(*tok_, *refs_, Special::kAsText), 0) << "of " << refs_->size() << " reference strings";
}

TEST_F(GptOssTokenizerTest, SpecialTokensParsedMatchGptTokenizer) {
  int with_specials = 0;
  for (const Reference& ref : *refs_) with_specials += ref.special_ids != ref.ids;
  EXPECT_GE(with_specials, 100) << "reference strings whose special tokens parse";
  EXPECT_EQ(CountMismatches(*tok_, *refs_, Special::kParse), 0) << "of " << refs_->size() << " reference strings";
}

TEST_F(GptOssTokenizerTest, TheTokenizerInterfaceParsesSpecialTokens) {
  const Tokenizer& base = *tok_;
  for (const Reference& ref : *refs_) {
    absl::StatusOr<std::vector<uint32_t>> ids = base.Encode(ref.text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, ref.special_ids) << json(ref.text).dump();
  }
}

TEST_F(GptOssTokenizerTest, DecodeOfEncodeIsTheText) {
  for (const Reference& ref : *refs_) {
    const std::vector<uint32_t> as_text = EncodeOk(*tok_, ref.text, Special::kAsText);
    EXPECT_EQ(DecodeOk(*tok_, as_text, /*include_special=*/false), ref.text);
    const std::vector<uint32_t> parsed = EncodeOk(*tok_, ref.text, Special::kParse);
    EXPECT_EQ(DecodeOk(*tok_, parsed, /*include_special=*/true), ref.text);
  }
}

TEST_F(GptOssTokenizerTest, StreamingDecodeEqualsFullDecode) {
  for (const Reference& ref : *refs_) {
    IncrementalDetokenizer detok(tok_);
    std::string streamed;
    for (const uint32_t id : ref.special_ids) streamed += detok.Push(id);
    streamed += detok.Flush();
    // Streams drop special tokens, like Decode without include_special.
    EXPECT_EQ(streamed, DecodeOk(*tok_, ref.special_ids, false)) << json(ref.text).dump();
  }
}

TEST_F(GptOssTokenizerTest, HarmonySpecialTokenIds) {
  EXPECT_EQ(tok_->num_tokens(), kTokenizerJsonIds);
  EXPECT_EQ(tok_->vocab_size(), kGptOssVocabSize);
  const std::vector<std::pair<std::string, uint32_t>> specials = {
      {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999},       {"<|return|>", 200002},
      {"<|constrain|>", 200003},   {"<|channel|>", 200005},         {"<|start|>", 200006},
      {"<|end|>", 200007},         {"<|message|>", 200008},         {"<|call|>", 200012},
      {"<|endofprompt|>", 200018}, {"<|reserved_200000|>", 200000}, {"<|reserved_200017|>", 200017},
  };
  for (const auto& [text, id] : specials) {
    EXPECT_EQ(tok_->AddedTokenId(text), id) << text;
    EXPECT_TRUE(tok_->IsSpecial(id)) << text;
    EXPECT_EQ(tok_->DecodeToken(id), "") << text;
    EXPECT_EQ(EncodeOk(*tok_, text, Special::kParse), std::vector<uint32_t>{id}) << text;
    EXPECT_EQ(DecodeOk(*tok_, {id}, /*include_special=*/true), text);
    const std::vector<uint32_t> as_text = EncodeOk(*tok_, text, Special::kAsText);
    EXPECT_GT(as_text.size(), 1u) << text;
    for (const uint32_t t : as_text) EXPECT_FALSE(tok_->IsSpecial(t)) << text;
  }
  EXPECT_FALSE(tok_->IsSpecial(13225));  // "Hello"
  EXPECT_EQ(tok_->DecodeToken(13225), "Hello");
  // The last id of model.vocab, and the first added token.
  EXPECT_FALSE(tok_->IsSpecial(199997));
  EXPECT_FALSE(tok_->DecodeToken(199997).empty());
}

// tiktoken's o200k_harmony also names <|reserved_200018|> .. <|reserved_201087|>;
// the tokenizer.json has no tokens past 200018, so those ids decode to ""
// and their names are plain text in both modes.
TEST_F(GptOssTokenizerTest, IdsPastTheTokenizerJsonAreEmpty) {
  for (const uint32_t id : {200019u, 200100u, 201087u}) {
    EXPECT_EQ(tok_->DecodeToken(id), "") << id;
    EXPECT_FALSE(tok_->IsSpecial(id)) << id;
    EXPECT_EQ(DecodeOk(*tok_, {13225, id, 2375}, true), "Hello world") << id;
  }
  EXPECT_EQ(tok_->Decode({201088}).status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string text : {"<|reserved_200018|>", "<|reserved_200100|>"}) {
    EXPECT_FALSE(tok_->AddedTokenId(text).has_value()) << text;
    EXPECT_EQ(EncodeOk(*tok_, text, Special::kParse), EncodeOk(*tok_, text, Special::kAsText)) << text;
  }
}

// With the file's own size (no vocab_size given) ids stop at 200018.
TEST_F(GptOssTokenizerTest, OwnVocabSize) {
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromFile(GptOssPath());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), kTokenizerJsonIds);
  EXPECT_EQ(*(*tok)->Encode("<|start|>user"), (std::vector<uint32_t>{200006, 1428}));
  EXPECT_EQ((*tok)->Decode({200019}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Where JavaScript's regex (gpt-tokenizer) and tiktoken's disagree, these
// strings are kept out of the reference file. pdserve follows tiktoken and
// HuggingFace tokenizers, whose \s is Unicode White_Space (JavaScript's has
// U+FEFF and lacks U+0085): the ids below are HuggingFace tokenizers' (npm
// `tokenizers` 0.23.2 on this tokenizer.json).
TEST_F(GptOssTokenizerTest, WhiteSpaceFollowsTiktokenWhereJavaScriptDiffers) {
  const std::vector<std::pair<std::string, std::vector<uint32_t>>> cases = {
      {"\xEF\xBB\xBF's", {5574, 6, 82}},                       // JS: 5416, 123, 885
      {"_  \xEF\xBB\xBF", {62, 220, 71280}},                   // JS: 62, 256, 5416, 123
      {"\xEF\xBB\xBF\xEF\xBB\xBF  x", {135153, 220, 1215}},    // JS: 5416, 123, 5416, 123, 220, 1215
      {"\xE3\x80\x80\xE3\x80\x80\xC2\x85", {4577, 126, 227}},  // JS: 1397, 1397, 126, 227
      {"x  \xC2\x85y", {87, 256, 126, 227, 88}},               // JS: 87, 220, 1322, 227, 88
      {"e \xE1\xA0\x8E f", {68, 220, 157, 254, 236, 285}},     // JS agrees; raw PCRE2 \s would not
  };
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(EncodeOk(*tok_, text, Special::kAsText), want) << json(text).dump();
  }
}

}  // namespace
}  // namespace pdserve

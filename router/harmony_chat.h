// OpenAI's harmony chat format (gpt-oss; github.com/openai/harmony,
// docs/format.md), prompt side: a conversation rendered into token ids.
//
//   HarmonyTokens     the structure tokens (<|start|>, <|message|>, ...),
//                     looked up by name in the model's tokenizer
//   HarmonyConversation  what /v1/chat/completions sends: reasoning effort,
//                     the date, the developer's instructions, user and
//                     assistant turns
//   HarmonyChat       renders one into ids; docs/http.md, "Harmony models"
//   HarmonyStopIds    <|return|> and <|call|>: generation ends at either
//
// The prompt is, with every <|...|> one special id and every text encoded
// as text (BpeTokenizer::SpecialTokens::kAsText, so that a user who writes
// "<|start|>" sends those characters, never the token):
//
//   <|start|>system<|message|>You are ChatGPT, a large language model
//   trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: DATE\n\n
//   Reasoning: EFFORT\n\n# Valid channels: analysis, commentary, final.
//   Channel must be included for every message.<|end|>
//   <|start|>developer<|message|># Instructions\n\nINSTRUCTIONS<|end|>
//   <|start|>user<|message|>TEXT<|end|>
//   <|start|>assistant<|channel|>final<|message|>TEXT<|end|>
//   ...
//   <|start|>assistant
//
// as the harmony library renders it (render_conversation_for_completion:
// SystemContent with the model identity, knowledge cutoff, date, effort
// and the three channels required; DeveloperContent with instructions) and
// as gpt-oss's chat_template.jinja does: the developer message only when
// there are instructions, an assistant turn of the history as its final
// channel only (the chain of thought of earlier turns is dropped), and the
// "Current date" line left out when `date` is empty. The output side is
// harmony_parser.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer.h"

namespace pdserve {

class BpeTokenizer;

struct HarmonyTokens {
  uint32_t start = 0;      // <|start|>      200006 in o200k_harmony
  uint32_t end = 0;        // <|end|>        200007
  uint32_t message = 0;    // <|message|>    200008
  uint32_t channel = 0;    // <|channel|>    200005
  uint32_t constrain = 0;  // <|constrain|>  200003
  uint32_t return_ = 0;    // <|return|>     200002
  uint32_t call = 0;       // <|call|>       200012

  // The ids of `tokenizer`'s added tokens of these names. InvalidArgument
  // naming the first one missing, or when the tokenizer is not a BPE one.
  static absl::StatusOr<HarmonyTokens> Find(const Tokenizer& tokenizer);
};

// <|return|> and <|call|> of `tokenizer`, where it has them (else empty):
// the stops of a harmony model, besides its eos_token_id.
std::vector<uint32_t> HarmonyStopIds(const Tokenizer& tokenizer);

enum class ReasoningEffort { kLow, kMedium, kHigh };
// "low", "medium", "high".
const char* ReasoningEffortName(ReasoningEffort effort);

struct HarmonyTurn {
  enum class Role { kUser, kAssistant } role = Role::kUser;
  std::string text;
};

struct HarmonyConversation {
  ReasoningEffort effort = ReasoningEffort::kMedium;
  std::string date;          // "YYYY-MM-DD"; empty: no "Current date" line
  std::string instructions;  // the developer message's; empty: none
  std::vector<HarmonyTurn> turns;
};

// The model identity and knowledge cutoff of gpt-oss's system message.
inline constexpr char kHarmonyModelIdentity[] = "You are ChatGPT, a large language model trained by OpenAI.";
inline constexpr char kHarmonyKnowledgeCutoff[] = "2024-06";

class HarmonyChat {
 public:
  // `tokenizer` (not owned; must outlive this) must be a BpeTokenizer with
  // the harmony special tokens (HarmonyTokens::Find's errors otherwise).
  // `date`, when not empty, is every prompt's "Current date" (tests);
  // otherwise Today() is today's UTC date.
  static absl::StatusOr<std::unique_ptr<HarmonyChat>> Create(const Tokenizer* tokenizer, std::string date = "");

  // The prompt's token ids, ending with the generation prefix
  // <|start|>assistant. InvalidArgument naming the turn when a text cannot
  // be encoded (not valid UTF-8), or the tokenizer's ResourceExhausted.
  absl::StatusOr<std::vector<uint32_t>> Render(const HarmonyConversation& conversation) const;

  // The system message's text for `effort` and `date` (header above).
  static std::string SystemText(ReasoningEffort effort, const std::string& date);

  // The date Create was given, or today's in UTC ("YYYY-MM-DD").
  std::string Today() const;

  const HarmonyTokens& tokens() const { return tokens_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }

 private:
  HarmonyChat(const BpeTokenizer* bpe, HarmonyTokens tokens, std::string date);
  // Appends <|start|>HEADER<|message|>TEXT<|end|>; `channel` (may be
  // empty) becomes <|channel|>CHANNEL in the header.
  absl::Status AppendMessage(const std::string& role, const std::string& channel, const std::string& text,
                             std::vector<uint32_t>* ids) const;
  absl::Status AppendText(const std::string& text, std::vector<uint32_t>* ids) const;

  const Tokenizer* tokenizer_;
  const BpeTokenizer* bpe_;
  const HarmonyTokens tokens_;
  const std::string date_;
};

}  // namespace pdserve

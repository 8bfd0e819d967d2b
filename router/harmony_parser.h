// HarmonyParser: the output side of the harmony chat format
// (harmony_chat.h): a gpt-oss model's generated token ids, one at a time,
// become text deltas for the OpenAI answer, as vLLM splits them:
//
//   channel analysis            -> reasoning_content
//   channel final               -> content
//   channel commentary          -> content (a "preamble": harmony's docs say
//                                  it is meant for the user)
//   a message with a recipient  -> dropped (a tool call, " to=functions.x"
//   or from another role           in the header; pdserve refuses tools)
//
// The prompt ends with <|start|>assistant, so the output starts inside an
// assistant header: "<|channel|>analysis<|message|>...<|end|>
// <|start|>assistant<|channel|>final<|message|>...<|return|>". Headers and
// structure tokens never reach the text; each message's text goes through
// its own IncrementalDetokenizer, so a character split across tokens comes
// out whole, and one cut by the message's end becomes U+FFFD.
//
// Malformed output (random weights never write valid harmony) never fails
// and never shows a header or a special token:
//   - text outside any message, or a message without a channel or with an
//     unknown one, is content;
//   - a header longer than kMaxHeaderTokens is taken for text: it and what
//     follows, up to the next structure token, are content;
//   - a header that ends (<|start|>, <|end|>, <|return|>, <|call|> or the
//     end of the output) before its <|message|> is dropped when it has a
//     <|channel|> (a real header cut short: max_tokens), else its text is
//     content;
//   - <|message|>, <|channel|> and <|constrain|> inside a message's text,
//     and every other special token, are skipped.
// <|return|> and <|call|> end a message like <|end|> (the router ends the
// generation at them; with ignore_eos what follows is parsed on).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/incremental_detokenizer.h"
#include "router/harmony_chat.h"

namespace pdserve {

enum class HarmonyTarget { kReasoning, kContent };

struct HarmonyDelta {
  HarmonyTarget target = HarmonyTarget::kContent;
  std::string text;
};

class HarmonyParser {
 public:
  static constexpr size_t kMaxHeaderTokens = 64;

  // `tokenizer` (not owned) must outlive the parser.
  HarmonyParser(const HarmonyTokens& tokens, const Tokenizer* tokenizer);

  // Parses one generated id; appends its text, if any, to *out (to the
  // last delta when that has the same target).
  void Push(uint32_t id, std::vector<HarmonyDelta>* out);
  // The output ended: flushes held-back bytes and a pending header.
  void Finish(std::vector<HarmonyDelta>* out);

  // <|return|> or <|call|> was seen.
  bool returned() const { return returned_; }

 private:
  enum class State { kHeader, kBody, kBetween };
  enum class Sink { kReasoning, kContent, kDrop };

  void PushHeader(uint32_t id, std::vector<HarmonyDelta>* out);
  void PushBody(uint32_t id, std::vector<HarmonyDelta>* out);
  void PushBetween(uint32_t id, std::vector<HarmonyDelta>* out);
  // A new header; `implied_assistant` when no <|start|>ROLE precedes it.
  void BeginHeader(bool implied_assistant);
  // <|message|> ended the header: where the message's text goes.
  Sink HeaderSink() const;
  // The header ended before its <|message|> (see the file comment).
  void AbandonHeader(std::vector<HarmonyDelta>* out);
  // The header is too long to be one: its text and what follows is content.
  void HeaderIsText(std::vector<HarmonyDelta>* out);
  // Ends the current message's text (flushing the detokenizer).
  void EndBody(std::vector<HarmonyDelta>* out);
  void Emit(Sink sink, std::string text, std::vector<HarmonyDelta>* out) const;
  bool IsMessageEnd(uint32_t id) const { return id == t_.end || id == t_.return_ || id == t_.call; }

  const HarmonyTokens t_;
  const Tokenizer* tokenizer_;
  IncrementalDetokenizer detok_;
  State state_ = State::kHeader;
  bool implied_assistant_ = true;  // the header's role came with the prompt
  std::vector<uint32_t> header_;
  Sink sink_ = Sink::kContent;
  bool returned_ = false;
};

}  // namespace pdserve

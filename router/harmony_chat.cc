#include "router/harmony_chat.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/tokenizer/bpe_tokenizer.h"
#include "common/util/status_macros.h"

namespace pdserve {
namespace {

const BpeTokenizer* AsBpe(const Tokenizer& tokenizer) { return dynamic_cast<const BpeTokenizer*>(&tokenizer); }

}  // namespace

absl::StatusOr<HarmonyTokens> HarmonyTokens::Find(const Tokenizer& tokenizer) {
  const BpeTokenizer* bpe = AsBpe(tokenizer);
  if (bpe == nullptr) {
    return absl::InvalidArgumentError(
        "the harmony chat format needs the model's BPE tokenizer (tokenizer.json with the harmony special tokens); "
        "this tokenizer is not one");
  }
  HarmonyTokens t;
  const std::pair<const char*, uint32_t*> names[] = {
      {"<|start|>", &t.start},         {"<|end|>", &t.end},       {"<|message|>", &t.message},
      {"<|channel|>", &t.channel},     {"<|constrain|>", &t.constrain},
      {"<|return|>", &t.return_},      {"<|call|>", &t.call},
  };
  for (const auto& [name, id] : names) {
    const std::optional<uint32_t> found = bpe->AddedTokenId(name);
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat("the tokenizer has no added token ", name,
                                                     ": the harmony chat format needs o200k_harmony's special tokens"));
    }
    *id = *found;
  }
  return t;
}

std::vector<uint32_t> HarmonyStopIds(const Tokenizer& tokenizer) {
  std::vector<uint32_t> ids;
  if (const BpeTokenizer* bpe = AsBpe(tokenizer)) {
    for (const char* name : {"<|return|>", "<|call|>"}) {
      if (std::optional<uint32_t> id = bpe->AddedTokenId(name)) ids.push_back(*id);
    }
  }
  return ids;
}

const char* ReasoningEffortName(ReasoningEffort effort) {
  switch (effort) {
    case ReasoningEffort::kLow: return "low";
    case ReasoningEffort::kMedium: return "medium";
    case ReasoningEffort::kHigh: return "high";
  }
  return "medium";
}

absl::StatusOr<std::unique_ptr<HarmonyChat>> HarmonyChat::Create(const Tokenizer* tokenizer, std::string date) {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("the harmony chat format needs the model's tokenizer");
  absl::StatusOr<HarmonyTokens> tokens = HarmonyTokens::Find(*tokenizer);
  if (!tokens.ok()) return tokens.status();
  return std::unique_ptr<HarmonyChat>(new HarmonyChat(AsBpe(*tokenizer), *tokens, std::move(date)));
}

HarmonyChat::HarmonyChat(const BpeTokenizer* bpe, HarmonyTokens tokens, std::string date)
    : tokenizer_(bpe), bpe_(bpe), tokens_(tokens), date_(std::move(date)) {}

std::string HarmonyChat::Today() const {
  if (!date_.empty()) return date_;
  return absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone());
}

std::string HarmonyChat::SystemText(ReasoningEffort effort, const std::string& date) {
  // harmony's SystemContent: the identity, cutoff and date lines, then the
  // effort, then the channels, as sections apart by a blank line.
  std::string text = absl::StrCat(kHarmonyModelIdentity, "\nKnowledge cutoff: ", kHarmonyKnowledgeCutoff);
  if (!date.empty()) absl::StrAppend(&text, "\nCurrent date: ", date);
  absl::StrAppend(&text, "\n\nReasoning: ", ReasoningEffortName(effort),
                  "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.");
  return text;
}

absl::Status HarmonyChat::AppendText(const std::string& text, std::vector<uint32_t>* ids) const {
  absl::StatusOr<std::vector<uint32_t>> enc = bpe_->Encode(text, BpeTokenizer::SpecialTokens::kAsText);
  if (!enc.ok()) return enc.status();
  ids->insert(ids->end(), enc->begin(), enc->end());
  return absl::OkStatus();
}

absl::Status HarmonyChat::AppendMessage(const std::string& role, const std::string& channel, const std::string& text,
                                        std::vector<uint32_t>* ids) const {
  ids->push_back(tokens_.start);
  RETURN_IF_ERROR(AppendText(role, ids));
  if (!channel.empty()) {
    ids->push_back(tokens_.channel);
    RETURN_IF_ERROR(AppendText(channel, ids));
  }
  ids->push_back(tokens_.message);
  RETURN_IF_ERROR(AppendText(text, ids));
  ids->push_back(tokens_.end);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint32_t>> HarmonyChat::Render(const HarmonyConversation& conversation) const {
  std::vector<uint32_t> ids;
  RETURN_IF_ERROR(AppendMessage("system", "", SystemText(conversation.effort, conversation.date), &ids));
  if (!conversation.instructions.empty()) {
    const std::string text = absl::StrCat("# Instructions\n\n", conversation.instructions);
    absl::Status st = AppendMessage("developer", "", text, &ids);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("the instructions: ", st.message()));
  }
  for (size_t i = 0; i < conversation.turns.size(); ++i) {
    const HarmonyTurn& turn = conversation.turns[i];
    const bool user = turn.role == HarmonyTurn::Role::kUser;
    absl::Status st = AppendMessage(user ? "user" : "assistant", user ? "" : "final", turn.text, &ids);
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("turn ", i, " (", user ? "user" : "assistant", "): ", st.message()));
    }
  }
  ids.push_back(tokens_.start);
  RETURN_IF_ERROR(AppendText("assistant", &ids));
  return ids;
}

}  // namespace pdserve

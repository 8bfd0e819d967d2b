#include "router/harmony_parser.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace pdserve {

HarmonyParser::HarmonyParser(const HarmonyTokens& tokens, const Tokenizer* tokenizer)
    : t_(tokens), tokenizer_(tokenizer), detok_(tokenizer) {}

void HarmonyParser::Push(uint32_t id, std::vector<HarmonyDelta>* out) {
  if (id == t_.return_ || id == t_.call) returned_ = true;
  switch (state_) {
    case State::kHeader: return PushHeader(id, out);
    case State::kBody: return PushBody(id, out);
    case State::kBetween: return PushBetween(id, out);
  }
}

void HarmonyParser::Finish(std::vector<HarmonyDelta>* out) {
  if (state_ == State::kHeader) AbandonHeader(out);
  if (state_ == State::kBody) EndBody(out);
  state_ = State::kBetween;
}

void HarmonyParser::PushHeader(uint32_t id, std::vector<HarmonyDelta>* out) {
  if (id == t_.message) {
    sink_ = HeaderSink();
    header_.clear();
    state_ = State::kBody;
  } else if (id == t_.start) {
    AbandonHeader(out);
    BeginHeader(/*implied_assistant=*/false);
  } else if (IsMessageEnd(id)) {
    AbandonHeader(out);
    state_ = State::kBetween;
  } else {
    header_.push_back(id);
    if (header_.size() > kMaxHeaderTokens) HeaderIsText(out);
  }
}

void HarmonyParser::PushBody(uint32_t id, std::vector<HarmonyDelta>* out) {
  if (IsMessageEnd(id)) {
    EndBody(out);
    state_ = State::kBetween;
  } else if (id == t_.start) {
    EndBody(out);
    BeginHeader(/*implied_assistant=*/false);
  } else if (id != t_.message && id != t_.channel && id != t_.constrain) {
    Emit(sink_, detok_.Push(id), out);
  }
}

void HarmonyParser::PushBetween(uint32_t id, std::vector<HarmonyDelta>* out) {
  if (id == t_.start) {
    BeginHeader(/*implied_assistant=*/false);
  } else if (id == t_.channel) {
    // A header without its <|start|>assistant: taken as the assistant's.
    BeginHeader(/*implied_assistant=*/true);
    header_.push_back(id);
  } else if (!tokenizer_->DecodeToken(id).empty()) {
    // Text outside any message.
    state_ = State::kBody;
    sink_ = Sink::kContent;
    Emit(sink_, detok_.Push(id), out);
  }
}

void HarmonyParser::BeginHeader(bool implied_assistant) {
  state_ = State::kHeader;
  implied_assistant_ = implied_assistant;
  header_.clear();
}

HarmonyParser::Sink HarmonyParser::HeaderSink() const {
  // The header's text by section: the role (and maybe " to=RECIPIENT")
  // before <|channel|>; the channel (and maybe " to=RECIPIENT" and a
  // content type) after it; after <|constrain|>, the constraint.
  std::string role_part, channel_part;
  int section = 0;
  for (uint32_t id : header_) {
    if (id == t_.channel) {
      section = 1;
    } else if (id == t_.constrain) {
      section = 2;
    } else if (section < 2) {
      (section == 0 ? role_part : channel_part) += tokenizer_->DecodeToken(id);
    }
  }
  std::string role, channel;
  bool recipient = false;
  for (const auto& [part, first] : {std::pair<const std::string*, std::string*>{&role_part, &role},
                                    std::pair<const std::string*, std::string*>{&channel_part, &channel}}) {
    for (absl::string_view word : absl::StrSplit(*part, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty())) {
      if (absl::StartsWith(word, "to=")) {
        recipient = true;
      } else if (first->empty()) {
        *first = std::string(word);
      }
    }
  }
  if (recipient) return Sink::kDrop;  // a tool call
  if (!implied_assistant_ && !role.empty() && role != "assistant") return Sink::kDrop;
  return channel == "analysis" ? Sink::kReasoning : Sink::kContent;
}

void HarmonyParser::AbandonHeader(std::vector<HarmonyDelta>* out) {
  const bool structured =
      !implied_assistant_ || std::find(header_.begin(), header_.end(), t_.channel) != header_.end();
  if (!structured) {
    // Text the model wrote where a header belongs.
    for (uint32_t id : header_) Emit(Sink::kContent, detok_.Push(id), out);
    Emit(Sink::kContent, detok_.Flush(), out);
  }
  header_.clear();
}

void HarmonyParser::HeaderIsText(std::vector<HarmonyDelta>* out) {
  state_ = State::kBody;
  sink_ = Sink::kContent;
  for (uint32_t id : header_) Emit(sink_, detok_.Push(id), out);
  header_.clear();
}

void HarmonyParser::EndBody(std::vector<HarmonyDelta>* out) { Emit(sink_, detok_.Flush(), out); }

void HarmonyParser::Emit(Sink sink, std::string text, std::vector<HarmonyDelta>* out) const {
  if (sink == Sink::kDrop || text.empty()) return;
  const HarmonyTarget target = sink == Sink::kReasoning ? HarmonyTarget::kReasoning : HarmonyTarget::kContent;
  if (!out->empty() && out->back().target == target) {
    out->back().text += text;
  } else {
    out->push_back({target, std::move(text)});
  }
}

}  // namespace pdserve

// The OpenAI wire format (router/openai_protocol.h): requests parse into the
// GenerateRequest the gRPC path takes, every refusal names its field, and
// responses/chunks/errors have OpenAI's shape.
#include "router/openai_protocol.h"

#include <gtest/gtest.h>

#include <string>

#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using json = nlohmann::json;

class OpenAiProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmpl_.roles["system"] = {"<s>", "</s>\n"};
    tmpl_.roles["user"] = {"U: ", "\n"};
    tmpl_.roles["assistant"] = {"A: ", "\n"};
    tmpl_.generation_prefix = "A: ";
    model_ = {"tiny", 100, &tmpl_, 1700000000};
  }

  std::optional<OpenAiError> Completion(const std::string& body) {
    out_ = OpenAiRequest();
    return ParseCompletionRequest(body, model_, &out_);
  }
  std::optional<OpenAiError> Chat(const std::string& body) {
    out_ = OpenAiRequest();
    return ParseChatRequest(body, model_, &out_);
  }

  ChatTemplate tmpl_;
  ServedModel model_;
  OpenAiRequest out_;
};

TEST_F(OpenAiProtocolTest, CompletionFieldsMapToGenerateRequest) {
  ASSERT_FALSE(Completion(R"({"model": "tiny", "prompt": "hello", "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "top_k": 40, "seed": 11, "stop": ["x", "yz"], "stream": true,
      "stream_options": {"include_usage": true}, "n": 1, "echo": false, "user": "ignored"})"));
  EXPECT_EQ(out_.endpoint, OpenAiEndpoint::kCompletions);
  EXPECT_EQ(out_.generate.text(), "hello");
  const auto& s = out_.generate.sampling();
  EXPECT_EQ(s.max_new_tokens(), 7u);
  EXPECT_FLOAT_EQ(s.temperature(), 0.5f);
  EXPECT_FLOAT_EQ(s.top_p(), 0.9f);
  EXPECT_EQ(s.top_k(), 40u);
  EXPECT_EQ(s.seed(), 11u);
  ASSERT_EQ(s.stop_size(), 2);
  EXPECT_EQ(s.stop(1), "yz");
  EXPECT_TRUE(out_.stream);
  EXPECT_TRUE(out_.include_usage);
  EXPECT_TRUE(out_.generate.request_id().empty());
  EXPECT_TRUE(out_.seed_given);
}

TEST_F(OpenAiProtocolTest, DefaultsAreOpenAis) {
  ASSERT_FALSE(Completion(R"({"prompt": "hi"})"));
  EXPECT_EQ(out_.generate.sampling().max_new_tokens(), kDefaultCompletionMaxTokens);
  EXPECT_FLOAT_EQ(out_.generate.sampling().temperature(), 1.0f);
  EXPECT_FALSE(out_.stream);
  EXPECT_FALSE(out_.seed_given);
  ASSERT_FALSE(Completion(R"({"prompt": "hi", "stop": "\n", "top_k": -1})"));
  ASSERT_EQ(out_.generate.sampling().stop_size(), 1);
  EXPECT_EQ(out_.generate.sampling().top_k(), 0u);
}

TEST_F(OpenAiProtocolTest, PromptForms) {
  ASSERT_FALSE(Completion(R"({"prompt": [72, 105]})"));
  EXPECT_TRUE(out_.generate.text().empty());
  ASSERT_EQ(out_.generate.token_ids_size(), 2);
  EXPECT_EQ(out_.generate.token_ids(1), 105u);
  ASSERT_FALSE(Completion(R"({"prompt": ["one string"]})"));
  EXPECT_EQ(out_.generate.text(), "one string");
  ASSERT_FALSE(Completion(R"({"prompt": [[1, 2, 3]]})"));
  EXPECT_EQ(out_.generate.token_ids_size(), 3);
}

// Every 400 names its field.
TEST_F(OpenAiProtocolTest, BadFieldsAre400NamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "prompt"},
      {R"({"prompt": ""})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": ["a", "b"]})", "prompt"},
      {R"({"prompt": [1, -2]})", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": "a", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 101})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "a", "temperature": -1})", "temperature"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "a", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "a", "top_k": -2})", "top_k"},
      {R"({"prompt": "a", "seed": 1.5})", "seed"},
      {R"({"prompt": "a", "stop": 3})", "stop"},
      {R"({"prompt": "a", "stop": ["ok", ""]})", "stop"},
      {R"({"prompt": "a", "stream": "yes"})", "stream"},
      {R"({"prompt": "a", "stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
      {R"({"prompt": "a", "n": 2})", "n"},
      {R"({"prompt": "a", "echo": true})", "echo"},
      {R"({"prompt": "a", "best_of": 3})", "best_of"},
      {R"({"prompt": "a", "logprobs": 5})", "logprobs"},
      {R"({"prompt": "a", "presence_penalty": 0.5})", "presence_penalty"},
      {R"({"prompt": "a", "logit_bias": {"1": 2}})", "logit_bias"},
      {R"({"prompt": "a", "model": 3})", "model"},
  };
  for (const auto& [body, field] : cases) {
    std::optional<OpenAiError> e = Completion(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->http_status, 400) << body;
    EXPECT_EQ(e->param, field) << body;
    EXPECT_EQ(e->type, "invalid_request_error") << body;
    EXPECT_NE(e->message.find(std::string(field).substr(0, 4)), std::string::npos) << body << ": " << e->message;
  }
  std::optional<OpenAiError> e = Completion("{not json");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->http_status, 400);
}

TEST_F(OpenAiProtocolTest, UnknownModelIs404ModelNotFound) {
  std::optional<OpenAiError> e = Completion(R"({"model": "gpt-4", "prompt": "a"})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->http_status, 404);
  EXPECT_EQ(e->code, "model_not_found");
  EXPECT_EQ(e->param, "model");
  const json body = json::parse(ErrorBody(*e));
  EXPECT_EQ(body["error"]["code"], "model_not_found");
  EXPECT_EQ(body["error"]["param"], "model");
  EXPECT_TRUE(body["error"]["message"].is_string());
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
}

TEST_F(OpenAiProtocolTest, ChatRendersTheTemplate) {
  ASSERT_FALSE(Chat(R"({"messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": "yo"}, {"role": "user", "content": "again"}], "max_tokens": 3})"));
  EXPECT_EQ(out_.endpoint, OpenAiEndpoint::kChat);
  EXPECT_EQ(out_.generate.text(), "<s>be brief</s>\nU: hi there\nA: yo\nU: again\nA: ");
  EXPECT_EQ(out_.generate.sampling().max_new_tokens(), 3u);
  ASSERT_FALSE(Chat(R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 9})"));
  EXPECT_EQ(out_.generate.sampling().max_new_tokens(), 9u);
}

TEST_F(OpenAiProtocolTest, BadChatIs400NamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}]})", "messages[1].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 3})", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})", "tools"},
  };
  for (const auto& [body, field] : cases) {
    std::optional<OpenAiError> e = Chat(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->http_status, 400) << body;
    EXPECT_EQ(e->param, field) << body << ": " << e->message;
  }
}

TEST_F(OpenAiProtocolTest, ChatWithoutTemplateIs400WithTheReason) {
  model_.chat_template = nullptr;
  std::optional<OpenAiError> e = Chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->http_status, 400);
  EXPECT_NE(e->message.find("chat template"), std::string::npos) << e->message;
}

TEST_F(OpenAiProtocolTest, WholeResponses) {
  pdserve::v1::Usage u;
  u.set_prompt_tokens(5);
  u.set_generated_tokens(3);
  const CompletionPiece p{"cmpl-1", 42, "tiny", "abc", "stop"};
  json c = json::parse(CompletionBody(OpenAiEndpoint::kCompletions, p, u));
  EXPECT_EQ(c["id"], "cmpl-1");
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["created"], 42);
  EXPECT_EQ(c["model"], "tiny");
  EXPECT_EQ(c["choices"][0]["text"], "abc");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(c["usage"]["completion_tokens"], 3);
  EXPECT_EQ(c["usage"]["total_tokens"], 8);
  json chat = json::parse(CompletionBody(OpenAiEndpoint::kChat, p, u));
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "abc");
}

TEST_F(OpenAiProtocolTest, Chunks) {
  CompletionPiece p{"chatcmpl-1", 42, "tiny", "ab", ""};
  json first = json::parse(ChunkBody(OpenAiEndpoint::kChat, p, /*first=*/true, /*usage_null=*/true));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "ab");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(first.contains("usage") && first["usage"].is_null());
  p.text = "";
  p.finish_reason = "length";
  json last = json::parse(ChunkBody(OpenAiEndpoint::kChat, p, false, false));
  EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
  EXPECT_FALSE(last.contains("usage"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  json text = json::parse(ChunkBody(OpenAiEndpoint::kCompletions, {"cmpl-1", 1, "tiny", "z", ""}, true, false));
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "z");
  pdserve::v1::Usage u;
  u.set_prompt_tokens(2);
  u.set_generated_tokens(1);
  json usage = json::parse(UsageChunkBody(OpenAiEndpoint::kCompletions, p, u));
  EXPECT_TRUE(usage["choices"].is_array() && usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 3);
}

TEST_F(OpenAiProtocolTest, FinishReasons) {
  EXPECT_EQ(FinishReasonString(pdserve::v1::FINISH_REASON_EOS), "stop");
  EXPECT_EQ(FinishReasonString(pdserve::v1::FINISH_REASON_STOP), "stop");
  EXPECT_EQ(FinishReasonString(pdserve::v1::FINISH_REASON_LENGTH), "length");
  EXPECT_EQ(FinishReasonString(pdserve::v1::FINISH_REASON_UNSPECIFIED), "");
}

TEST_F(OpenAiProtocolTest, Models) {
  json m = json::parse(ModelsBody(model_));
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["owned_by"], "pdserve");
  EXPECT_EQ(m["data"][0]["max_model_len"], 100);
  EXPECT_EQ(m["data"][0]["created"], 1700000000);
}

TEST_F(OpenAiProtocolTest, GrpcStatusesMapToHttp) {
  const std::pair<grpc::StatusCode, int> cases[] = {
      {grpc::StatusCode::INVALID_ARGUMENT, 400}, {grpc::StatusCode::UNAUTHENTICATED, 401},
      {grpc::StatusCode::NOT_FOUND, 404},        {grpc::StatusCode::RESOURCE_EXHAUSTED, 429},
      {grpc::StatusCode::UNAVAILABLE, 503},      {grpc::StatusCode::DEADLINE_EXCEEDED, 504},
      {grpc::StatusCode::INTERNAL, 500},
  };
  for (const auto& [code, http] : cases) {
    EXPECT_EQ(ErrorFromGrpc(grpc::Status(code, "m"), OpenAiEndpoint::kCompletions).http_status, http) << code;
  }
  EXPECT_EQ(ErrorFromGrpc(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no"), OpenAiEndpoint::kChat).code,
            "invalid_api_key");
  // The router's field names become OpenAI's.
  OpenAiError e = ErrorFromGrpc(
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "sampling.max_new_tokens 9000 is above this router's cap"),
      OpenAiEndpoint::kCompletions);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.message.find("max_new_tokens"), std::string::npos) << e.message;
  EXPECT_EQ(ErrorFromGrpc(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "token_ids[1] = 9 is not below"),
                          OpenAiEndpoint::kCompletions)
                .param,
            "prompt");
  EXPECT_EQ(ErrorFromGrpc(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "text tokenizes to no tokens"),
                          OpenAiEndpoint::kChat)
                .param,
            "messages");
}

}  // namespace
}  // namespace pdserve

// The OpenAI wire format (router/openai_protocol.h): requests parse into the
// GenerateRequest the gRPC path takes, every refusal names its field, and
// responses/chunks/errors have OpenAI's shape.
#include "router/openai_protocol.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

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

// Every gRPC code 0..16, checked against the table docs/http.md states.
TEST_F(OpenAiProtocolTest, EveryGrpcCodeMapsToHttp) {
  struct Want {
    int http;
    const char* type;
    const char* code;
  };
  const Want want[17] = {
      {500, "server_error", "internal_error"},                  // OK (a call without an answer)
      {503, "service_unavailable", "cancelled"},                // CANCELLED by the server
      {500, "server_error", "internal_error"},                  // UNKNOWN
      {400, "invalid_request_error", ""},                       // INVALID_ARGUMENT
      {504, "timeout", "deadline_exceeded"},                    // DEADLINE_EXCEEDED
      {404, "invalid_request_error", "not_found"},              // NOT_FOUND
      {500, "server_error", "internal_error"},                  // ALREADY_EXISTS
      {403, "permission_error", "permission_denied"},           // PERMISSION_DENIED
      {429, "rate_limit_error", "rate_limit_exceeded"},         // RESOURCE_EXHAUSTED
      {500, "server_error", "internal_error"},                  // FAILED_PRECONDITION
      {500, "server_error", "internal_error"},                  // ABORTED
      {400, "invalid_request_error", "context_length_exceeded"},  // OUT_OF_RANGE
      {501, "not_implemented_error", "not_implemented"},        // UNIMPLEMENTED
      {500, "server_error", "internal_error"},                  // INTERNAL
      {503, "service_unavailable", "unavailable"},              // UNAVAILABLE
      {500, "server_error", "internal_error"},                  // DATA_LOSS
      {401, "authentication_error", "invalid_api_key"},         // UNAUTHENTICATED
  };
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<grpc::StatusCode>(c);
    EXPECT_EQ(static_cast<int>(GrpcToHttp(code).grpc_code), c);
    const grpc::Status st = code == grpc::StatusCode::OK ? grpc::Status::OK : grpc::Status(code, "nope 12 34");
    for (OpenAiEndpoint endpoint : {OpenAiEndpoint::kCompletions, OpenAiEndpoint::kChat}) {
      const OpenAiError e = ErrorFromGrpc(st, endpoint, "", /*client_gone=*/false);
      EXPECT_EQ(e.http_status, want[c].http) << "code " << c;
      EXPECT_EQ(e.type, want[c].type) << "code " << c;
      EXPECT_EQ(e.code, want[c].code) << "code " << c;
      EXPECT_TRUE(e.param.empty()) << "code " << c;
      if (c != 0) {
        EXPECT_EQ(e.message, "nope 12 34") << "code " << c;  // the numbers travel in the message
      }
      EXPECT_FALSE(e.message.empty()) << "code " << c;
      // client_gone changes CANCELLED only.
      const OpenAiError gone = ErrorFromGrpc(st, endpoint, "", /*client_gone=*/true);
      EXPECT_EQ(gone.http_status, code == grpc::StatusCode::CANCELLED ? kClientClosedRequest : want[c].http)
          << "code " << c;
      // The 2-argument form is the 3-argument one without a field.
      const OpenAiError two = ErrorFromGrpc(st, endpoint);
      EXPECT_EQ(two.http_status, e.http_status);
      EXPECT_EQ(two.code, e.code);
    }
  }
  EXPECT_EQ(GrpcToHttp(static_cast<grpc::StatusCode>(99)).http_status, 500);
}

// RESOURCE_EXHAUSTED is a 429 rate limit, but not when the router's reason
// trailer says no decode worker's whole KV budget can ever hold the
// request: that is the client's to shorten (400 context_length_exceeded).
TEST_F(OpenAiProtocolTest, RequestNoKvBudgetHoldsIsNotARateLimit) {
  const grpc::Status st(grpc::StatusCode::RESOURCE_EXHAUSTED, "needs 67,174,400 bytes (--kv-budget-mb 32)");
  for (OpenAiEndpoint endpoint : {OpenAiEndpoint::kCompletions, OpenAiEndpoint::kChat}) {
    const OpenAiError e = ErrorFromGrpc(st, endpoint, "", false, "kv_budget_exceeded");
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.code, "context_length_exceeded");
    EXPECT_EQ(e.message, st.error_message());
    EXPECT_EQ(ErrorFromGrpc(st, endpoint, "", false, "").http_status, 429);
    EXPECT_EQ(ErrorFromGrpc(st, endpoint, "", false, "something_else").http_status, 429);
    // The reason refines RESOURCE_EXHAUSTED only.
    EXPECT_EQ(ErrorFromGrpc(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x"), endpoint, "", false,
                            "kv_budget_exceeded").http_status,
              503);
  }
}

// The router's field arrives as data (the pdserve-param trailer) and is
// translated; nothing is guessed from the message.
TEST_F(OpenAiProtocolTest, RouterFieldBecomesParam) {
  const grpc::Status bad(grpc::StatusCode::INVALID_ARGUMENT, "sampling.max_new_tokens 9000 is above this router's cap");
  OpenAiError e = ErrorFromGrpc(bad, OpenAiEndpoint::kCompletions, "sampling.max_new_tokens");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.message.find("max_new_tokens"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("9000"), std::string::npos) << e.message;
  // No field sent: no param, whatever the message says.
  EXPECT_EQ(ErrorFromGrpc(bad, OpenAiEndpoint::kCompletions).param, "");
  EXPECT_EQ(ErrorFromGrpc(bad, OpenAiEndpoint::kCompletions, "").param, "");
  const std::tuple<const char*, OpenAiEndpoint, const char*> cases[] = {
      {"token_ids[1]", OpenAiEndpoint::kCompletions, "prompt"},
      {"token_ids", OpenAiEndpoint::kCompletions, "prompt"},
      {"text", OpenAiEndpoint::kCompletions, "prompt"},
      {"text", OpenAiEndpoint::kChat, "messages"},
      {"sampling.top_p", OpenAiEndpoint::kChat, "top_p"},
      {"sampling.temperature", OpenAiEndpoint::kCompletions, "temperature"},
      {"sampling.stop", OpenAiEndpoint::kCompletions, "stop"},
      {"sampling.stop[2]", OpenAiEndpoint::kCompletions, "stop"},
      {"sampling.max_new_tokens", OpenAiEndpoint::kChat, "max_tokens"},
      {"texts", OpenAiEndpoint::kCompletions, "texts"},  // not "text": passed on as it is
      {"request_id", OpenAiEndpoint::kCompletions, "request_id"},
  };
  for (const auto& [field, endpoint, param] : cases) {
    EXPECT_EQ(ErrorFromGrpc(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "m"), endpoint, field).param, param)
        << field;
  }
  // The ids-only tokenizer's refusal of text: 501 naming the prompt.
  e = ErrorFromGrpc(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "text: no tokenizer"), OpenAiEndpoint::kChat, "text");
  EXPECT_EQ(e.http_status, 501);
  EXPECT_EQ(e.param, "messages");
  EXPECT_EQ(ErrorFromGrpc(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no"), OpenAiEndpoint::kChat).code,
            "invalid_api_key");
}

// top_p 0 keeps only the most likely token: greedy, sent as temperature 0
// (the proto's top_p 0 would mean "keep all").
TEST_F(OpenAiProtocolTest, TopPZeroIsGreedy) {
  ASSERT_FALSE(Completion(R"({"prompt": "a", "top_p": 0, "temperature": 0.8})"));
  EXPECT_EQ(out_.generate.sampling().temperature(), 0.0f);
  EXPECT_EQ(out_.generate.sampling().top_p(), 1.0f);
  ASSERT_FALSE(Chat(R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0.0})"));
  EXPECT_EQ(out_.generate.sampling().temperature(), 0.0f);
  EXPECT_EQ(out_.generate.sampling().top_p(), 1.0f);
  // Other values pass on unchanged.
  ASSERT_FALSE(Completion(R"({"prompt": "a", "top_p": 0.25, "temperature": 0.8})"));
  EXPECT_FLOAT_EQ(out_.generate.sampling().temperature(), 0.8f);
  EXPECT_FLOAT_EQ(out_.generate.sampling().top_p(), 0.25f);
  ASSERT_FALSE(Completion(R"({"prompt": "a"})"));
  EXPECT_FLOAT_EQ(out_.generate.sampling().top_p(), 1.0f);
  for (const char* body : {R"({"prompt": "a", "top_p": -0.01})", R"({"prompt": "a", "top_p": 1.01})",
                           R"({"prompt": "a", "top_p": "0.5"})"}) {
    std::optional<OpenAiError> e = Completion(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->http_status, 400) << body;
    EXPECT_EQ(e->param, "top_p") << body;
  }
}

// Fields pdserve does not know are refused, never ignored.
TEST_F(OpenAiProtocolTest, UnknownFieldsAre400NamingThem) {
  const std::pair<const char*, const char*> completions[] = {
      {R"({"prompt": "a", "min_p": 0.5})", "min_p"},
      {R"({"prompt": "a", "repetition_penalty": 1.3})", "repetition_penalty"},
      {R"({"prompt": "a", "min_tokens": 3})", "min_tokens"},
      {R"({"prompt": "a", "use_beam_search": false})", "use_beam_search"},
      {R"({"prompt": "a", "min_p": null})", "min_p"},
      {R"({"prompt": "a", "messages": [{"role": "user", "content": "x"}]})", "messages"},
      {R"({"prompt": "a", "response_format": {"type": "text"}})", "response_format"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true, "extra": 1}})", "stream_options.extra"},
      {R"({"prompt": "a", "stream": true, "stream_options": {"include_obfuscation": true}})",
       "stream_options.include_obfuscation"},
      {R"({"prompt": "a", "logprobs": 0})", "logprobs"},
      {R"({"prompt": "a", "user": 5})", "user"},
  };
  for (const auto& [body, field] : completions) {
    std::optional<OpenAiError> e = Completion(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->http_status, 400) << body;
    EXPECT_EQ(e->param, field) << body << ": " << e->message;
    EXPECT_NE(e->message.find(field), std::string::npos) << e->message;
  }
  const std::pair<const char*, const char*> chat[] = {
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})",
       "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
          "json_schema": {"name": "s", "schema": {}}}})", "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "repetition_penalty": 1.3})", "repetition_penalty"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_json": {}})", "guided_json"},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt": "y"})", "prompt"},
      {R"({"messages": [{"role": "user", "content": "x"}], "suffix": ""})", "suffix"},
      {R"({"messages": [{"role": "user", "content": "x"}], "store": true})", "store"},
      {R"({"messages": [{"role": "user", "content": "x"}], "service_tier": "flex"})", "service_tier"},
      {R"({"messages": [{"role": "user", "content": "x"}], "metadata": "m"})", "metadata"},
      {R"({"messages": [{"role": "user", "content": "x", "name": "bob"}]})", "messages[0].name"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y",
          "tool_calls": [{"id": "1"}]}]})", "messages[1].tool_calls"},
  };
  for (const auto& [body, field] : chat) {
    std::optional<OpenAiError> e = Chat(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->http_status, 400) << body;
    EXPECT_EQ(e->param, field) << body << ": " << e->message;
  }
}

// A refused field at its default (or null) is accepted: clients send them.
TEST_F(OpenAiProtocolTest, DefaultsOfUnimplementedFieldsAreAccepted) {
  EXPECT_FALSE(Completion(R"({"prompt": "a", "n": 1, "best_of": 1, "echo": false, "suffix": "", "logprobs": null,
      "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "user": "u"})"));
  EXPECT_FALSE(Chat(R"({"messages": [{"role": "user", "content": "x", "name": null},
      {"role": "assistant", "content": "y", "tool_calls": [], "refusal": null}],
      "n": 1, "logprobs": false, "top_logprobs": 0, "tools": [], "tool_choice": "none", "functions": null,
      "response_format": {"type": "text"}, "store": false, "service_tier": "auto", "modalities": ["text"],
      "metadata": {"k": "v"}, "parallel_tool_calls": true, "user": "u", "audio": null, "stream": true,
      "stream_options": {"include_usage": true, "include_obfuscation": false}})"));
  EXPECT_FALSE(Chat(R"({"messages": [{"role": "user", "content": "x"}], "service_tier": "default"})"));
}

// The table's walk: every field of each endpoint, set to a value other than
// its default, is either honoured (implemented, or accepted with no effect)
// or refused with a 400 naming it; each allowed default is accepted; a
// field of the other endpoint only is refused.
TEST_F(OpenAiProtocolTest, EveryTableFieldIsImplementedOrRefusedByName) {
  ASSERT_FALSE(OpenAiFields().empty());
  for (const OpenAiField& f : OpenAiFields()) {
    ASSERT_EQ(FindOpenAiField(f.name), &f) << f.name << " is in the table twice";
    for (OpenAiEndpoint endpoint : {OpenAiEndpoint::kCompletions, OpenAiEndpoint::kChat}) {
      const bool chat = endpoint == OpenAiEndpoint::kChat;
      json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "x"}}}}} : json{{"prompt", "a"}};
      auto parse = [&](const json& b) { return chat ? Chat(b.dump()) : Completion(b.dump()); };
      const std::string where = std::string(f.name) + (chat ? " (chat)" : " (completions)");
      body[f.name] = std::string(f.name) == "model" ? json(model_.id) : json::parse(f.example);
      std::optional<OpenAiError> e = parse(body);
      if (!IsFieldOf(f, endpoint)) {
        ASSERT_TRUE(e) << where << " is not a field of the endpoint, yet accepted";
        EXPECT_EQ(e->http_status, 400) << where;
        EXPECT_EQ(e->param, f.name) << where;
        continue;
      }
      switch (f.state) {
        case FieldState::kImplemented:
        case FieldState::kNoEffect:
          EXPECT_FALSE(e) << where << ": " << (e ? e->message : "");
          break;
        case FieldState::kOnlyDefault:
        case FieldState::kRefused:
        case FieldState::kHarmonyOnly:  // model_ renders a chat template
          ASSERT_TRUE(e) << where << " = " << f.example << " accepted";
          EXPECT_EQ(e->http_status, 400) << where;
          EXPECT_EQ(e->param, f.name) << where;
          EXPECT_NE(e->message.find(f.name), std::string::npos) << where << ": " << e->message;
          break;
      }
      if (f.state == FieldState::kImplemented) continue;
      // null is absent; kOnlyDefault's defaults are accepted.
      body[f.name] = nullptr;
      EXPECT_FALSE(parse(body)) << where << " = null";
      if (f.state == FieldState::kOnlyDefault) {
        for (const json& allowed : json::parse(f.allowed)) {
          body[f.name] = allowed;
          EXPECT_FALSE(parse(body)) << where << " = " << allowed.dump();
        }
      }
    }
  }
}

// docs/http.md has a row for every field, stating what the code does:
// "| `name` | <completions> | <chat> |".
TEST_F(OpenAiProtocolTest, DocsListEveryTableField) {
  std::ifstream in(PDSERVE_SOURCE_DIR "/docs/http.md");
  ASSERT_TRUE(in) << "cannot read docs/http.md";
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string docs = buf.str();
  for (const OpenAiField& f : OpenAiFields()) {
    const std::string row = "\n| `" + std::string(f.name) + "` | " +
                            FieldStateText(f, OpenAiEndpoint::kCompletions) + " | " +
                            FieldStateText(f, OpenAiEndpoint::kChat) + " |";
    EXPECT_NE(docs.find(row), std::string::npos) << "docs/http.md lacks the row (or it differs):" << row;
  }
}

}  // namespace
}  // namespace pdserve

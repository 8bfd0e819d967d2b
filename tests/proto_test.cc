// The public proto's names and numbers are a contract with outside clients
// (docs/design.md): this test fails if any of them changes.
#include <gtest/gtest.h>

#include "pdserve/internal/v1/worker.grpc.pb.h"
#include "pdserve/v1/generate.grpc.pb.h"

namespace pdserve {
namespace {

void ExpectField(const google::protobuf::Descriptor* d, const char* name, int number) {
  const google::protobuf::FieldDescriptor* f = d->FindFieldByName(name);
  ASSERT_NE(f, nullptr) << d->full_name() << "." << name;
  EXPECT_EQ(f->number(), number) << d->full_name() << "." << name;
}

TEST(ProtoTest, PublicNamesAndNumbersAreFixed) {
  const auto* svc = v1::GenerateRequest::descriptor()->file()->FindServiceByName("Generator");
  ASSERT_NE(svc, nullptr);
  EXPECT_EQ(svc->full_name(), "pdserve.v1.Generator");
  ASSERT_NE(svc->FindMethodByName("Generate"), nullptr);
  EXPECT_TRUE(svc->FindMethodByName("Generate")->server_streaming());

  const auto* req = v1::GenerateRequest::descriptor();
  ExpectField(req, "request_id", 1);
  ExpectField(req, "text", 2);
  ExpectField(req, "token_ids", 3);
  ExpectField(req, "sampling", 4);
  const auto* sp = v1::SamplingParams::descriptor();
  ExpectField(sp, "max_new_tokens", 1);
  ExpectField(sp, "temperature", 2);
  ExpectField(sp, "top_p", 3);
  ExpectField(sp, "top_k", 4);
  ExpectField(sp, "seed", 5);
  ExpectField(sp, "stop", 6);
  ExpectField(sp, "ignore_eos", 7);
  const auto* resp = v1::GenerateResponse::descriptor();
  ExpectField(resp, "token_ids", 1);
  ExpectField(resp, "text", 2);
  ExpectField(resp, "finish_reason", 3);
  EXPECT_EQ(v1::FINISH_REASON_UNSPECIFIED, 0);
}

// The bytes an existing client sends: a request written against today's
// proto must keep parsing to the same values (a renumbered field, or a
// changed wire type such as float -> double or uint32 -> fixed32, breaks
// it), and pdserve must serialize the same request to the same bytes.
TEST(ProtoTest, GenerateRequestWireBytesAreFixed) {
  const std::string golden(
      "\x0a\x02r1"                  // 1 request_id: "r1"
      "\x12\x02hi"                  // 2 text: "hi"
      "\x1a\x02\x05\x07"            // 3 token_ids: packed [5, 7]
      "\x22\x10"                    // 4 sampling (16 bytes):
      "\x08\x08"                    //   1 max_new_tokens: 8 (varint)
      "\x15\x00\x00\x00\x3f"        //   2 temperature: 0.5 (32-bit float)
      "\x20\x28"                    //   4 top_k: 40
      "\x28\x2a"                    //   5 seed: 42
      "\x32\x01\x0a"                //   6 stop: ["\n"]
      "\x38\x01",                   //   7 ignore_eos: true
      30);
  v1::GenerateRequest req;
  ASSERT_TRUE(req.ParseFromString(golden));
  EXPECT_EQ(req.request_id(), "r1");
  EXPECT_EQ(req.text(), "hi");
  ASSERT_EQ(req.token_ids_size(), 2);
  EXPECT_EQ(req.token_ids(1), 7u);
  EXPECT_EQ(req.sampling().max_new_tokens(), 8u);
  EXPECT_EQ(req.sampling().temperature(), 0.5f);
  EXPECT_EQ(req.sampling().top_k(), 40u);
  EXPECT_EQ(req.sampling().seed(), 42u);
  ASSERT_EQ(req.sampling().stop_size(), 1);
  EXPECT_EQ(req.sampling().stop(0), "\n");
  EXPECT_TRUE(req.sampling().ignore_eos());
  EXPECT_EQ(req.SerializeAsString(), golden);
}

// The last message of a stream as a client decodes it: tokens, text,
// finish reason (the enum's numbers are part of the contract), usage.
TEST(ProtoTest, GenerateResponseWireBytesAreFixed) {
  v1::GenerateResponse resp;
  resp.add_token_ids(300);
  resp.set_text("ok");
  resp.set_finish_reason(v1::FINISH_REASON_STOP);
  resp.mutable_usage()->set_prompt_tokens(2);
  resp.mutable_usage()->set_generated_tokens(1);
  resp.set_request_id("r1");
  const std::string want(
      "\x0a\x02\xac\x02"            // 1 token_ids: packed [300]
      "\x12\x02ok"                  // 2 text: "ok"
      "\x18\x03"                    // 3 finish_reason: STOP = 3
      "\x22\x04\x08\x02\x10\x01"    // 4 usage: prompt_tokens 2, generated_tokens 1
      "\x2a\x02r1",                 // 5 request_id: "r1"
      20);
  EXPECT_EQ(resp.SerializeAsString(), want);
  EXPECT_EQ(v1::FINISH_REASON_LENGTH, 1);
  EXPECT_EQ(v1::FINISH_REASON_EOS, 2);
}

// Workers of two builds talk during a rolling restart: the hand-off
// chunk's checksum stays a fixed32 next to its sequence number, and the
// oneof's cases keep their numbers.
TEST(ProtoTest, KvChunkWireBytesAreFixed) {
  internal::v1::KvChunk chunk;
  chunk.set_seq(3);
  chunk.set_crc32c(0xDEADBEEF);
  chunk.mutable_data()->set_layer(5);
  chunk.mutable_data()->set_payload("xy");
  const std::string want(
      "\x08\x03"                    // 1 seq: 3
      "\x15\xef\xbe\xad\xde"        // 2 crc32c: fixed32, little-endian
      "\x22\x06\x08\x05\x22\x02xy", // 4 data: layer 5, payload "xy"
      15);
  EXPECT_EQ(chunk.SerializeAsString(), want);
  internal::v1::KvChunk commit;
  ASSERT_TRUE(commit.ParseFromString(std::string("\x2a\x02\x08\x09", 4)));  // 5 commit: first_token 9
  EXPECT_EQ(commit.body_case(), internal::v1::KvChunk::kCommit);
  EXPECT_EQ(commit.commit().first_token(), 9u);
}

}  // namespace
}  // namespace pdserve

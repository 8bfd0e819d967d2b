// The public proto's names and numbers are a contract with outside clients
// (DESIGN.md): this test fails if any of them changes.
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

TEST(ProtoTest, KvChunkRoundTrips) {
  internal::v1::KvChunk chunk;
  chunk.set_seq(3);
  chunk.set_crc32c(0xDEADBEEF);
  chunk.mutable_data()->set_layer(5);
  chunk.mutable_data()->set_payload(std::string(1024, 'x'));
  internal::v1::KvChunk back;
  ASSERT_TRUE(back.ParseFromString(chunk.SerializeAsString()));
  EXPECT_EQ(back.seq(), 3u);
  EXPECT_EQ(back.data().layer(), 5u);
  EXPECT_EQ(back.data().payload().size(), 1024u);
  EXPECT_EQ(back.body_case(), internal::v1::KvChunk::kData);
}

}  // namespace
}  // namespace pdserve

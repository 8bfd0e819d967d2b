// The hand-off fault injector (common/handoff/fault_injection.h): the spec
// parser, and what each fault does to a hand-off's chunk sequence.
#include "common/handoff/fault_injection.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pdserve {
namespace {

using internal::v1::KvChunk;

// A header, 4 data chunks, a commit: seq 0..5.
std::vector<KvChunk> Handoff() {
  std::vector<KvChunk> chunks(6);
  chunks[0].set_seq(0);
  chunks[0].mutable_header()->set_n_layers(2);
  for (int i = 1; i <= 4; ++i) {
    chunks[i].set_seq(i);
    chunks[i].set_crc32c(100 + i);
    chunks[i].mutable_data()->set_payload(std::string(8, static_cast<char>('a' + i)));
  }
  chunks[5].set_seq(5);
  chunks[5].set_crc32c(7);
  chunks[5].mutable_commit()->set_first_token(42);
  return chunks;
}

// Runs a hand-off through a plan; returns what reached the wire.
std::vector<KvChunk> Inject(HandoffFault kind, int target) {
  HandoffFaultPlan plan(kind, target, /*delay_ms=*/1, /*handoff_number=*/1);
  std::vector<KvChunk> wire;
  auto write = [&](KvChunk& c) {
    wire.push_back(c);
    return true;
  };
  for (KvChunk& c : Handoff()) EXPECT_TRUE(plan.Write(c, write, nullptr));
  EXPECT_TRUE(plan.Flush(write));
  return wire;
}

std::vector<uint32_t> Seqs(const std::vector<KvChunk>& chunks) {
  std::vector<uint32_t> out;
  for (const auto& c : chunks) out.push_back(c.seq());
  return out;
}

TEST(HandoffFaultSpec, Parses) {
  auto c = ParseHandoffFaultSpec("rate=0.1,seed=7");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rate, 0.1);
  EXPECT_EQ(c->seed, 7u);
  EXPECT_EQ(c->kinds.size(), 6u);
  EXPECT_EQ(c->delay_ms, 200);
  c = ParseHandoffFaultSpec("rate=1,seed=3,kinds=corrupt+truncate,delay_ms=50");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kinds, (std::vector<HandoffFault>{HandoffFault::kCorrupt, HandoffFault::kTruncate}));
  EXPECT_EQ(c->delay_ms, 50);
}

TEST(HandoffFaultSpec, RejectsBadSpecs) {
  for (const char* bad : {"", "seed=1", "rate=2", "rate=-0.1", "rate=x", "rate=0.1,seed=-1", "rate=0.1,kinds=melt",
                          "rate=0.1,color=red", "rate=0.1,delay_ms=-5"}) {
    EXPECT_FALSE(ParseHandoffFaultSpec(bad).ok()) << bad;
  }
}

TEST(HandoffFaultPlan, Drop) { EXPECT_EQ(Seqs(Inject(HandoffFault::kDrop, 1)), (std::vector<uint32_t>{0, 1, 3, 4, 5})); }

TEST(HandoffFaultPlan, Duplicate) {
  EXPECT_EQ(Seqs(Inject(HandoffFault::kDuplicate, 0)), (std::vector<uint32_t>{0, 1, 1, 2, 3, 4, 5}));
}

TEST(HandoffFaultPlan, Reorder) {
  EXPECT_EQ(Seqs(Inject(HandoffFault::kReorder, 2)), (std::vector<uint32_t>{0, 1, 2, 4, 3, 5}));
}

TEST(HandoffFaultPlan, Truncate) {
  EXPECT_EQ(Seqs(Inject(HandoffFault::kTruncate, 1)), (std::vector<uint32_t>{0, 1}));
}

TEST(HandoffFaultPlan, Delay) {
  EXPECT_EQ(Seqs(Inject(HandoffFault::kDelay, 0)), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
}

TEST(HandoffFaultPlan, CorruptChangesOnePayloadByte) {
  const std::vector<KvChunk> want = Handoff();
  const std::vector<KvChunk> got = Inject(HandoffFault::kCorrupt, 2);
  ASSERT_EQ(Seqs(got), Seqs(want));
  for (size_t i = 0; i < got.size(); ++i) {
    if (i == 3) {
      EXPECT_NE(got[i].data().payload(), want[i].data().payload());
      EXPECT_EQ(got[i].crc32c(), want[i].crc32c());  // so the receiver's CRC check fails
    } else {
      EXPECT_EQ(got[i].SerializeAsString(), want[i].SerializeAsString()) << i;
    }
  }
}

TEST(HandoffFaultPlan, FewerDataChunksThanTheTargetHitsTheCommit) {
  EXPECT_EQ(Seqs(Inject(HandoffFault::kDrop, 9)), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  const std::vector<KvChunk> got = Inject(HandoffFault::kCorrupt, 9);
  EXPECT_NE(got.back().crc32c(), 7u);
}

TEST(HandoffFaultPlan, ProgressChunksPassThrough) {
  HandoffFaultPlan plan(HandoffFault::kDrop, 0, 1, 1);
  std::vector<KvChunk> wire;
  auto write = [&](KvChunk& c) {
    wire.push_back(c);
    return true;
  };
  KvChunk progress;
  progress.mutable_progress()->set_prefilled_tokens(5);
  EXPECT_TRUE(plan.Write(progress, write, nullptr));
  ASSERT_EQ(wire.size(), 1u);
  EXPECT_TRUE(wire[0].has_progress());
}

TEST(HandoffFaultPlan, OffWithoutTheEnvironmentVariable) {
  // The test runs without PDSERVE_FAULT_HANDOFF (see chaos_tests.cmake).
  if (std::getenv("PDSERVE_FAULT_HANDOFF") != nullptr) GTEST_SKIP() << "PDSERVE_FAULT_HANDOFF is set";
  for (int i = 0; i < 100; ++i) EXPECT_EQ(HandoffFaultPlan::ForNextHandoff(), nullptr);
}

}  // namespace
}  // namespace pdserve

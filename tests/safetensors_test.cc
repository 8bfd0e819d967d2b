#include "common/model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "tests/test_util.h"

namespace pdserve {
namespace {

void WriteRaw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);  // little-endian host
  out << header;
  out << std::string(data_bytes, '\0');
}

TEST(SafetensorsTest, WriteThenReadRoundTrips) {
  testing::TempDir dir;
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {0x3f80, 0x4000};  // bf16 1.0, 2.0
  ASSERT_TRUE(WriteSafetensors(dir.Sub("m.safetensors"),
                               {{"a", StDtype::kF32, {2, 3}, a.data(), 24}, {"b", StDtype::kBF16, {2}, b.data(), 4}})
                  .ok());
  auto f = SafetensorsFile::Open(dir.Sub("m.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  const StTensorView* va = (*f)->Find("a");
  ASSERT_NE(va, nullptr);
  EXPECT_EQ(va->dtype, StDtype::kF32);
  EXPECT_EQ(va->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(va->data, a.data(), 24), 0);
  const StTensorView* vb = (*f)->Find("b");
  ASSERT_NE(vb, nullptr);
  EXPECT_EQ(vb->dtype, StDtype::kBF16);
  EXPECT_EQ(std::memcmp(vb->data, b.data(), 4), 0);
  EXPECT_EQ((*f)->Find("c"), nullptr);
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  auto f = SafetensorsFile::Open("/nonexistent.safetensors");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, ShortFileIsDataLoss) {
  testing::TempDir dir;
  std::ofstream(dir.Sub("x")) << "abc";
  auto f = SafetensorsFile::Open(dir.Sub("x"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
}

TEST(SafetensorsTest, HeaderLongerThanFileIsDataLoss) {
  testing::TempDir dir;
  std::ofstream out(dir.Sub("x"), std::ios::binary);
  const uint64_t n = 1000;
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << "{}";
  out.close();
  auto f = SafetensorsFile::Open(dir.Sub("x"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(f.status().message()).find("1000"), std::string::npos) << f.status();
}

TEST(SafetensorsTest, GarbageHeaderIsDataLoss) {
  testing::TempDir dir;
  WriteRaw(dir.Sub("x"), "{not json", 0);
  EXPECT_EQ(SafetensorsFile::Open(dir.Sub("x")).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SafetensorsTest, TruncatedDataNamesTheTensor) {
  testing::TempDir dir;
  WriteRaw(dir.Sub("x"), R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  auto f = SafetensorsFile::Open(dir.Sub("x"));
  ASSERT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(f.status().message()).find("'w'"), std::string::npos) << f.status();
}

TEST(SafetensorsTest, ByteCountMustMatchShapeAndDtype) {
  testing::TempDir dir;
  WriteRaw(dir.Sub("x"), R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16);
  auto f = SafetensorsFile::Open(dir.Sub("x"));
  ASSERT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(f.status().message()).find("expected 12"), std::string::npos) << f.status();
}

TEST(SafetensorsTest, MalformedEntryIsDataLoss) {
  testing::TempDir dir;
  WriteRaw(dir.Sub("x"), R"({"w":{"dtype":"F32","shape":[-3],"data_offsets":[0,0]}})", 0);
  EXPECT_EQ(SafetensorsFile::Open(dir.Sub("x")).status().code(), absl::StatusCode::kDataLoss);
  WriteRaw(dir.Sub("y"), R"({"w":{"dtype":"F32","shape":[1]}})", 4);
  EXPECT_EQ(SafetensorsFile::Open(dir.Sub("y")).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SafetensorsTest, UnknownDtypeIsKeptForTheCallerToReject) {
  testing::TempDir dir;
  WriteRaw(dir.Sub("x"), R"({"w":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", 8);
  auto f = SafetensorsFile::Open(dir.Sub("x"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->Find("w")->dtype, StDtype::kOther);
  EXPECT_EQ((*f)->Find("w")->dtype_name, "I32");
}

}  // namespace
}  // namespace pdserve

#include "common/model/safetensors.h"

#include <gtest/gtest.h>

#include <unistd.h>

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

// Defect 8 (issue 12): numel of a [2^62, 4] shape overflowed int64 (UBSan),
// wrapped to 0 and let a 0-byte tensor claim that shape.
TEST(SafetensorsTest, ElementCountOverflowIsRejected) {
  StTensorView v;
  v.shape = {int64_t{1} << 62, 4};
  EXPECT_EQ(v.numel(), -1);
  v.shape = {3, 4};
  EXPECT_EQ(v.numel(), 12);
  testing::TempDir dir;
  WriteRaw(dir.Sub("x"), R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0);
  auto f = SafetensorsFile::Open(dir.Sub("x"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find("overflows"), std::string::npos) << f.status();
  // A product that fits int64 but not once multiplied by the element size.
  WriteRaw(dir.Sub("y"), R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0);
  EXPECT_EQ(SafetensorsFile::Open(dir.Sub("y")).status().code(), absl::StatusCode::kDataLoss);
  WriteRaw(dir.Sub("z"), R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})", 0);
  EXPECT_EQ(SafetensorsFile::Open(dir.Sub("z")).status().code(), absl::StatusCode::kDataLoss);
  WriteRaw(dir.Sub("r"), R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4);
  EXPECT_EQ(SafetensorsFile::Open(dir.Sub("r")).status().code(), absl::StatusCode::kDataLoss);
  StTensorToWrite t{"w", StDtype::kF32, {int64_t{1} << 62, 4}, nullptr, 0};
  EXPECT_EQ(WriteSafetensors(dir.Sub("out"), {t}).code(), absl::StatusCode::kInvalidArgument);
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Declared sizes are checked against the file's real size before anything is
// allocated from them: a header that claims 2^62 bytes costs nothing.
TEST(SafetensorsTest, HugeDeclaredSizesAllocateNothing) {
  testing::TempDir dir;
  // A tensor claiming 2^62 bytes of data in a 16-byte data section.
  WriteRaw(dir.Sub("big_tensor"),
           R"({"w":{"dtype":"F32","shape":[1152921504606846976],"data_offsets":[0,4611686018427387904]}})", 16);
  // A header length of 2^62 in a file of a few bytes.
  {
    std::ofstream out(dir.Sub("big_header"), std::ios::binary);
    const uint64_t n = uint64_t{1} << 62;
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  // The largest header length that does not overflow 8 + n.
  {
    std::ofstream out(dir.Sub("max_header"), std::ios::binary);
    const uint64_t n = ~uint64_t{0};
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  (void)SafetensorsFile::Open(dir.Sub("big_tensor"));  // warm up lazily allocated state
  const int64_t before = ResidentBytes();
  for (int i = 0; i < 20; ++i) {
    auto a = SafetensorsFile::Open(dir.Sub("big_tensor"));
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(a.status().message().find("4611686018427387904"), std::string::npos) << a.status();
    for (const char* name : {"big_header", "max_header"}) {
      auto b = SafetensorsFile::Open(dir.Sub(name));
      ASSERT_FALSE(b.ok());
      EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_NE(b.status().message().find("header declares"), std::string::npos) << b.status();
    }
  }
  const int64_t after = ResidentBytes();
  EXPECT_LT(after - before, int64_t{4} << 20) << "RSS grew from " << before << " to " << after << " bytes";
}

// Defect 8: a 300k-deep header crashed the error path (recursive dump()).
TEST(SafetensorsTest, DeepHeaderNestingIsDataLoss) {
  testing::TempDir dir;
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  WriteRaw(dir.Sub("x"), "{\"w\": " + deep + "}", 0);
  auto f = SafetensorsFile::Open(dir.Sub("x"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find("deeper than 64"), std::string::npos) << f.status().message().substr(0, 200);
  // Long values and names are quoted briefly.
  WriteRaw(dir.Sub("y"), "{\"" + std::string(1 << 20, 'n') + "\": [" + std::string(1 << 20, '1') + "]}", 0);
  f = SafetensorsFile::Open(dir.Sub("y"));
  ASSERT_FALSE(f.ok());
  EXPECT_LT(f.status().message().size(), 400u);
}

}  // namespace
}  // namespace pdserve

#include "common/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model/config.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using nlohmann::json;

// Large enough for any sane header (the 502M model's is ~20 KB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// Dimensions per tensor (the model's are 1-3).
constexpr size_t kMaxRank = 8;

// numel of `shape` into *out; false when a dimension is negative or the
// product overflows int64.
bool CheckedNumel(const std::vector<int64_t>& shape, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  *out = n;
  return true;
}

StDtype ParseDtype(const std::string& s) {
  if (s == "F32") return StDtype::kF32;
  if (s == "BF16") return StDtype::kBF16;
  if (s == "F16") return StDtype::kF16;
  if (s == "U8") return StDtype::kU8;
  return StDtype::kOther;
}

}  // namespace

const char* StDtypeName(StDtype dtype) {
  switch (dtype) {
    case StDtype::kF32: return "F32";
    case StDtype::kBF16: return "BF16";
    case StDtype::kF16: return "F16";
    case StDtype::kU8: return "U8";
    default: return "other";
  }
}

size_t StDtypeSize(StDtype dtype) {
  switch (dtype) {
    case StDtype::kF32: return 4;
    case StDtype::kBF16:
    case StDtype::kF16: return 2;
    case StDtype::kU8: return 1;
    default: return 0;
  }
}

int64_t StTensorView::numel() const {
  int64_t n = 0;
  return CheckedNumel(shape, &n) ? n : -1;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

const StTensorView* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

namespace {

// The parsed header and where the data section it indexes lies.
struct Header {
  json entries;                  // {"name": {dtype, shape, data_offsets}, "__metadata__": ...}
  const uint8_t* data = nullptr;  // the data section (offsets are relative to it)
  uint64_t data_size = 0;
};

// The u64 length, then the JSON header of the mapped file `bytes` (`size`
// bytes, at least 8): DataLoss when the length overruns the file or the
// text is too deep or not a JSON object.
absl::StatusOr<Header> ParseHeader(const std::string& path, const uint8_t* bytes, size_t size) {
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes || 8 + header_len > size) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "' is truncated or corrupt: header declares ",
                                            header_len, " bytes but the file has ", size, " bytes"));
  }
  const absl::string_view header_text(reinterpret_cast<const char*>(bytes + 8), header_len);
  if (absl::Status s = CheckJsonNesting(header_text, kMaxJsonDepth, "the header"); !s.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "': ", s.message()));
  }
  Header header;
  header.entries = json::parse(header_text.begin(), header_text.end(), nullptr, /*allow_exceptions=*/false);
  if (header.entries.is_discarded() || !header.entries.is_object()) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "' has a header that is not a JSON object"));
  }
  header.data = bytes + 8 + header_len;
  header.data_size = size - 8 - header_len;
  return header;
}

// One header entry as a view into the data section: DataLoss naming the
// tensor when the entry is malformed, its shape too large, its offsets
// outside the data, or its byte count not numel * element size.
absl::StatusOr<StTensorView> ParseTensorEntry(const std::string& path, const std::string& name, const json& e,
                                              const Header& header) {
  auto corrupt = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "': tensor '", name.substr(0, 80),
                                            name.size() > 80 ? "...' " : "' ", why));
  };
  if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
      !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
      e["data_offsets"].size() != 2) {
    return corrupt("has a malformed header entry: " + JsonExcerpt(e));
  }
  StTensorView v;
  v.dtype_name = e["dtype"].get<std::string>();
  if (v.dtype_name.size() > 16) v.dtype_name = v.dtype_name.substr(0, 16) + "...";
  v.dtype = ParseDtype(v.dtype_name);
  if (e["shape"].size() > kMaxRank) {
    return corrupt(absl::StrCat("has ", e["shape"].size(), " dimensions, at most ", kMaxRank, " are supported"));
  }
  for (const auto& d : e["shape"]) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return corrupt("has a non-integer, negative or huge dimension: " + JsonExcerpt(e["shape"]));
    }
    v.shape.push_back(d.get<int64_t>());
  }
  int64_t numel = 0;
  if (!CheckedNumel(v.shape, &numel)) {
    return corrupt(absl::StrCat("has shape [", absl::StrJoin(v.shape, ", "), "], whose element count overflows"));
  }
  const auto& offs = e["data_offsets"];
  if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned()) {
    return corrupt("has invalid data_offsets " + JsonExcerpt(offs));
  }
  const uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
  if (begin > end || end > header.data_size) {
    return corrupt(absl::StrCat("lies outside the file: data_offsets [", begin, ", ", end,
                                "] but the data section has ", header.data_size, " bytes (truncated file?)"));
  }
  v.data = header.data + begin;
  v.nbytes = end - begin;
  const size_t elem = StDtypeSize(v.dtype);
  uint64_t want = 0;
  if (elem != 0 && __builtin_mul_overflow(static_cast<uint64_t>(numel), elem, &want)) {
    return corrupt(absl::StrCat("has shape [", absl::StrJoin(v.shape, ", "), "], whose byte count overflows"));
  }
  if (elem != 0 && v.nbytes != want) {
    return corrupt(absl::StrCat("has ", v.nbytes, " bytes, expected ", want, " for ", v.dtype_name, " shape [",
                                absl::StrJoin(v.shape, ", "), "]"));
  }
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  RETURN_IF_ERROR(f->Map());
  ASSIGN_OR_RETURN(const Header header, ParseHeader(path, static_cast<const uint8_t*>(f->map_), f->map_size_));
  for (auto it = header.entries.begin(); it != header.entries.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    ASSIGN_OR_RETURN(StTensorView v, ParseTensorEntry(path, it.key(), it.value(), header));
    f->tensors_.emplace(it.key(), std::move(v));
  }
  return f;
}

absl::Status SafetensorsFile::Map() {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open checkpoint '", path_, "': ", strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat '", path_, "'"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat("checkpoint '", path_, "' is truncated: ", size,
                                            " bytes, expected at least 8 for the header length"));
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("cannot mmap '", path_, "': ", strerror(errno)));
  }
  map_ = map;
  map_size_ = size;
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<StTensorToWrite>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t numel = 0;
    uint64_t want = 0;
    if (!CheckedNumel(t.shape, &numel) ||
        __builtin_mul_overflow(static_cast<uint64_t>(numel), StDtypeSize(t.dtype), &want) || t.nbytes != want) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': ", t.nbytes,
                                                     " bytes do not match its shape and dtype"));
    }
    header[t.name] = {{"dtype", StDtypeName(t.dtype)}, {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');  // keeps the data 8-byte aligned

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  uint64_t n = h.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& t : tensors) out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.nbytes));
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("write to '", path, "' failed (disk full?)"));
  return absl::OkStatus();
}

}  // namespace pdserve

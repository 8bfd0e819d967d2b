// ReadField: one typed field of a JSON object, for the config loaders
// (config.cc, hf_config.cc). Internal to common/model.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model/config.h"
#include "nlohmann/json.hpp"

namespace pdserve {

// Reads `key` from `obj` into `out` when present. A present key with the
// wrong JSON type is an error naming the field.
template <typename T>
absl::Status ReadField(const nlohmann::json& obj, const std::string& key,
                       const std::string& path, T* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (!it->is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config field '", path, "' must be an integer, found ", JsonExcerpt(*it)));
      }
      if (it->is_number_unsigned() &&
          it->template get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config field '", path, "' is out of range, found ", it->template get<uint64_t>()));
      }
    }
    *out = it->template get<T>();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field '", path, "' has the wrong type: found ", JsonExcerpt(*it)));
  }
  return absl::OkStatus();
}

}  // namespace pdserve

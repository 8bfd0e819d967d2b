// Usage (the public proto's timings) as JSON, shared by the clients.
#pragma once

#include "nlohmann/json.hpp"
#include "pdserve/v1/generate.pb.h"

namespace pdserve {

// Every field of Usage by its proto name, numbers as JSON numbers (proto3's own
// JSON mapping writes 64-bit integers as strings). Reflection keeps fields
// added to Usage later without touching this client.
inline nlohmann::ordered_json UsageToJson(const pdserve::v1::Usage& usage) {
  using google::protobuf::FieldDescriptor;
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  const auto* desc = usage.GetDescriptor();
  const auto* refl = usage.GetReflection();
  for (int i = 0; i < desc->field_count(); ++i) {
    const FieldDescriptor* f = desc->field(i);
    if (f->is_repeated()) continue;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: j[f->name()] = refl->GetInt32(usage, f); break;
      case FieldDescriptor::CPPTYPE_INT64: j[f->name()] = refl->GetInt64(usage, f); break;
      case FieldDescriptor::CPPTYPE_UINT32: j[f->name()] = refl->GetUInt32(usage, f); break;
      case FieldDescriptor::CPPTYPE_UINT64: j[f->name()] = refl->GetUInt64(usage, f); break;
      case FieldDescriptor::CPPTYPE_FLOAT: j[f->name()] = refl->GetFloat(usage, f); break;
      case FieldDescriptor::CPPTYPE_DOUBLE: j[f->name()] = refl->GetDouble(usage, f); break;
      case FieldDescriptor::CPPTYPE_BOOL: j[f->name()] = refl->GetBool(usage, f); break;
      case FieldDescriptor::CPPTYPE_STRING: j[f->name()] = refl->GetString(usage, f); break;
      case FieldDescriptor::CPPTYPE_ENUM: j[f->name()] = refl->GetEnumValue(usage, f); break;
      default: break;
    }
  }
  return j;
}

}  // namespace pdserve

// Small helpers for absl::Status plumbing, in the style of Google's internal
// ASSIGN_OR_RETURN / RETURN_IF_ERROR.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PDS_CONCAT_INNER_(a, b) a##b
#define PDS_CONCAT_(a, b) PDS_CONCAT_INNER_(a, b)

// Returns from the current function with `expr`'s status when it is not OK.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status pds_status_ = (expr);     \
    if (!pds_status_.ok()) return pds_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo());` declares x from a StatusOr, or returns
// the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  PDS_ASSIGN_OR_RETURN_IMPL_(PDS_CONCAT_(pds_statusor_, __LINE__), lhs, expr)
#define PDS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

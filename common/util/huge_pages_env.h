// PDSERVE_HUGE_PAGES: one switch for both uses of 2 MiB pages, so the weights
// and malloc cannot disagree about what a value means.
//   kHugePagesEnv  the variable's name
//   HugePagesOn    the rule: unset or anything but "0" is on (pure)
// Users: HugePagesEnabled (huge_page_arena.h: weights copied onto huge
// pages) and DecideMallocTunables (omp_env.h: glibc malloc's hugetlb tunable).
#pragma once

#include <cstring>

namespace pdserve {

inline constexpr char kHugePagesEnv[] = "PDSERVE_HUGE_PAGES";

// `value` is the variable's value, nullptr when unset.
inline bool HugePagesOn(const char* value) { return value == nullptr || std::strcmp(value, "0") != 0; }

}  // namespace pdserve

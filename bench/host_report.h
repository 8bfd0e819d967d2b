// What a benchmark reports about the process and the machine it ran on, so
// a number can be read with the conditions that made it:
//   CurrentRssMb / PeakRssMb  resident memory now / the kernel's peak mark
//   ResetPeakRss              the peak mark set back to the current RSS
//                             (false where /proc/self/clear_refs is not
//                             writable)
//   MappedLibraries           shared objects mapped into the process whose
//                             file name contains one of `keys`
//   CpuFlags                  the CPU model and which of the ISA flags the
//                             kernels dispatch on it has and lacks
//   MeasureReadBandwidth      best GB/s over `reps` sums of a `gib`-GiB
//                             buffer on 2 MiB pages, with the current
//                             intra-op thread count
//   PrintMappedBlas           the BLAS (OpenBLAS, MKL or netlib) and math
//                             libraries mapped, on stdout
//   PrintShowConfig           at::show_config(): all of it, or the lines
//                             naming BLAS, LAPACK, OpenMP and the CPU
//                             capability
#pragma once

#include <string>
#include <vector>

namespace pdserve::bench {

double CurrentRssMb();
double PeakRssMb();
bool ResetPeakRss();
std::vector<std::string> MappedLibraries(const std::vector<std::string>& keys);
std::string CpuFlags();
// `*checksum` accumulates the sums, so the reads cannot be optimised away.
double MeasureReadBandwidth(double gib, int reps, double* checksum);
void PrintMappedBlas();
void PrintShowConfig(bool full);

}  // namespace pdserve::bench

// A 2-rank NCCL communicator for the KV hand-off, with its CUDA stream and
// device staging buffer. Host API only; nccl.h and the CUDA headers stay in
// nccl_comm.cc. Built only with PDSERVE_HAVE_NCCL.
//
// Every wait polls (ncclCommGetAsyncError, cudaStreamQuery) against a
// deadline and a stop flag, so that a peer that never shows up costs a
// timeout, not a hung thread. After any error the communicator is unusable:
// an unmatched send or receive would pair with the next hand-off's bytes.
// Abort() it and connect anew.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct ncclComm;
struct CUstream_st;

namespace pdserve {

// sizeof(ncclUniqueId).
inline constexpr size_t kNcclUniqueIdBytes = 128;

// CUDA devices this process sees. 0 when there are none; the error text of
// the CUDA runtime (no driver, no device) goes to *why.
int CudaDeviceCount(std::string* why);
// For tests on machines without a GPU: CudaDeviceCount() reports `n`
// (n < 0: the real count again).
void SetCudaDeviceCountForTesting(int n);

// A fresh ncclUniqueId, as kNcclUniqueIdBytes bytes. Internal with NCCL's
// error when it cannot make one.
absl::StatusOr<std::string> NewNcclUniqueId();

class NcclComm {
 public:
  // Joins the 2-rank communicator named by `unique_id` as `rank` (0 or 1)
  // on CUDA device `device`. Returns InvalidArgument for a malformed id,
  // DeadlineExceeded when the peer has not joined by `deadline`, Cancelled
  // when *stop turns true, Internal with the CUDA or NCCL error otherwise;
  // a failed init is aborted.
  static absl::StatusOr<std::unique_ptr<NcclComm>> Connect(const std::string& unique_id, int rank, int device,
                                                           absl::Time deadline,
                                                           const std::atomic<bool>* stop = nullptr);
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  // Aborts the communicator (ncclCommAbort frees it without the peer).
  ~NcclComm();

  // Sends `n` host bytes to the peer (staged through the device buffer)
  // and waits until they are sent. Callable from any thread, one at a time.
  // DeadlineExceeded past `deadline` (the peer did not receive), Cancelled
  // when *stop turns true, Internal on a CUDA or NCCL error.
  absl::Status Send(const void* data, size_t n, absl::Time deadline, const std::atomic<bool>* stop);
  // Receives `n` bytes from the peer into host memory; errors as Send.
  absl::Status Recv(void* data, size_t n, absl::Time deadline, const std::atomic<bool>* stop);

  int device() const { return device_; }

 private:
  NcclComm(ncclComm* comm, CUstream_st* stream, int rank, int device)
      : comm_(comm), stream_(stream), peer_(1 - rank), device_(device) {}
  absl::Status EnsureStaging(size_t n);
  // Polls until the communicator has enqueued its last call and the stream
  // has drained.
  absl::Status Wait(const char* what, absl::Time deadline, const std::atomic<bool>* stop);

  ncclComm* comm_;
  CUstream_st* stream_;
  const int peer_;
  const int device_;
  void* staging_ = nullptr;  // device memory
  size_t staging_bytes_ = 0;
};

}  // namespace pdserve

#include "common/handoff/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pdserve {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "NcclConnectRequest carries 128-byte ids");

std::atomic<int> g_device_count_override{-1};

absl::Status CudaError(const std::string& what, cudaError_t e) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

absl::Status NcclError(const std::string& what, ncclResult_t r, ncclComm_t comm) {
  std::string detail = comm != nullptr ? ncclGetLastError(comm) : "";
  return absl::InternalError(
      absl::StrCat(what, ": ", ncclGetErrorString(r), detail.empty() ? "" : absl::StrCat(" (", detail, ")")));
}

// Spins briefly (a 4 MiB chunk takes well under a millisecond), then sleeps.
void Backoff(int* polls) {
  if (++*polls < 1000) {
    std::this_thread::yield();
  } else {
    absl::SleepFor(absl::Microseconds(50));
  }
}

// Polls `comm` until its asynchronous work (a non-blocking init or call) is
// done. Errors as NcclComm::Connect.
absl::Status AwaitComm(ncclComm_t comm, const char* what, absl::Time deadline, const std::atomic<bool>* stop) {
  for (int polls = 0;; Backoff(&polls)) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return NcclError(what, r, comm);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError(what, state, comm);
    if (stop != nullptr && stop->load()) return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    if (absl::Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(what, ": the peer did not answer"));
  }
}

}  // namespace

int CudaDeviceCount(std::string* why) {
  const int forced = g_device_count_override.load();
  if (forced == 0 && why != nullptr) *why = "none, as a test asked";
  if (forced >= 0) return forced;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "no CUDA device";
  return n;
}

void SetCudaDeviceCountForTesting(int n) { g_device_count_override = n; }

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return NcclError("ncclGetUniqueId", r, nullptr);
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Connect(const std::string& unique_id, int rank, int device,
                                                            absl::Time deadline, const std::atomic<bool>* stop) {
  if (unique_id.size() != sizeof(ncclUniqueId) || (rank != 0 && rank != 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL unique id of ", unique_id.size(), " bytes (expected ", sizeof(ncclUniqueId), ")"));
  }
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return CudaError(absl::StrCat("CUDA device ", device), e);
  cudaStream_t stream = nullptr;
  e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return CudaError("cudaStreamCreate", e);

  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  // Non-blocking, so that a peer that never joins costs a timeout.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, rank, &config);
  absl::Status st = r == ncclSuccess || r == ncclInProgress ? absl::OkStatus() : NcclError("ncclCommInitRank", r, comm);
  if (st.ok()) st = AwaitComm(comm, "ncclCommInitRank", deadline, stop);
  if (!st.ok()) {
    if (comm != nullptr) ncclCommAbort(comm);
    cudaStreamDestroy(stream);
    return st;
  }
  return std::unique_ptr<NcclComm>(new NcclComm(comm, stream, rank, device));
}

NcclComm::~NcclComm() {
  cudaSetDevice(device_);
  ncclCommAbort(comm_);
  if (staging_ != nullptr) cudaFree(staging_);
  cudaStreamDestroy(stream_);
}

absl::Status NcclComm::EnsureStaging(size_t n) {
  if (n <= staging_bytes_) return absl::OkStatus();
  if (staging_ != nullptr) cudaFree(staging_);
  staging_ = nullptr;
  staging_bytes_ = 0;
  cudaError_t e = cudaMalloc(&staging_, n);
  if (e != cudaSuccess) return CudaError(absl::StrCat("cudaMalloc of ", n, " staging bytes"), e);
  staging_bytes_ = n;
  return absl::OkStatus();
}

absl::Status NcclComm::Wait(const char* what, absl::Time deadline, const std::atomic<bool>* stop) {
  absl::Status st = AwaitComm(comm_, what, deadline, stop);
  if (!st.ok()) return st;
  for (int polls = 0;; Backoff(&polls)) {
    cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return CudaError(what, e);
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) return NcclError(what, state, comm_);
    if (stop != nullptr && stop->load()) return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    if (absl::Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(what, ": the peer did not answer"));
  }
}

// Host memory is pageable (a CPU LibTorch's tensors): copy it through the
// staging buffer. With a CUDA LibTorch the K/V would already be in device
// memory and ncclSend could take its pointer directly, without the copy.
absl::Status NcclComm::Send(const void* data, size_t n, absl::Time deadline, const std::atomic<bool>* stop) {
  cudaError_t e = cudaSetDevice(device_);
  if (e != cudaSuccess) return CudaError(absl::StrCat("CUDA device ", device_), e);
  absl::Status st = EnsureStaging(n);
  if (!st.ok()) return st;
  // On the communicator's stream: a synchronous cudaMemcpy from pageable
  // memory may return before its DMA lands, and the stream does not wait
  // for the default one.
  e = cudaMemcpyAsync(staging_, data, n, cudaMemcpyHostToDevice, stream_);
  if (e != cudaSuccess) return CudaError("cudaMemcpyAsync to the staging buffer", e);
  ncclResult_t r = ncclSend(staging_, n, ncclUint8, peer_, comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress) return NcclError("ncclSend", r, comm_);
  return Wait("ncclSend", deadline, stop);
}

absl::Status NcclComm::Recv(void* data, size_t n, absl::Time deadline, const std::atomic<bool>* stop) {
  cudaError_t e = cudaSetDevice(device_);
  if (e != cudaSuccess) return CudaError(absl::StrCat("CUDA device ", device_), e);
  absl::Status st = EnsureStaging(n);
  if (!st.ok()) return st;
  ncclResult_t r = ncclRecv(staging_, n, ncclUint8, peer_, comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress) return NcclError("ncclRecv", r, comm_);
  st = Wait("ncclRecv", deadline, stop);
  if (!st.ok()) return st;
  // Device to pageable host memory returns only once the copy is done.
  e = cudaMemcpy(data, staging_, n, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return CudaError("cudaMemcpy from the staging buffer", e);
  return absl::OkStatus();
}

}  // namespace pdserve

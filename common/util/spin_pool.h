// The helper threads of a decode step's short parallel regions (the matmul
// chunks of gemv_tiles.h, the flash-decoding splits).
//   SpinPool::Get     the process's pool (threads made on first use)
//   SpinPool::TryHelp runs work on the caller and on the helpers awake in time
//   OnSpinPoolThread  true on a helper (nested regions run inline there)
//   SpinPoolSpinUs    how long an idle helper spins before it sleeps
//   SpinPoolEnabled   PDSERVE_SPIN_POOL=0 turns the pool off (OpenMP instead)
//   SpinPoolSummary   one phrase for the start line
//
// Why not OpenMP: a batch-1 decode step is ~49 regions of 20-60 us each,
// between serial ops. On this project's 2-vCPU VMs (pdserve-region-bench,
// docs/benchmarks.md §8) a libgomp region costs 4-12 us past its
// work after a serial gap of 5-50 us, and ~47 us once its threads have
// gone to sleep (the bounded spin of omp_env.h gives up after a few us;
// waking a sleeping vCPU is that slow). A region here costs ~2 us: an idle
// helper pauses for 20 us, then yields the core between checks (a
// co-tenant's runnable thread gets it) until SpinPoolSpinUs (default
// 200 us) after its last region, then sleeps. So helpers stay awake
// through a step and sleep between requests.
//
// Work is offered, not assigned: a helper joins a region only if it wakes
// before the caller has finished its own share, and the caller waits only
// for helpers that joined. So `work` must split itself (take chunks from a
// shared counter, as ForEachChunk does) and be safe to run on any number of
// threads at once, and a helper that is descheduled (a co-tenant on the same
// cores) costs the region nothing.
// No LibTorch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace pdserve {

class SpinPool {
 public:
  // The process's pool. Never destroyed: its threads outlive static
  // destructors (they are detached and sleep when idle).
  static SpinPool& Get();

  // Runs work(ctx) on the calling thread and on up to `helpers` pool threads
  // that are awake in time (threads are made on first use), and returns when
  // every call has returned. Returns false without running anything when
  // the pool is already running another thread's region, the caller is a
  // pool thread or the pool is off (SpinPoolEnabled): the caller then runs
  // the work some other way. work must not throw.
  bool TryHelp(int helpers, void (*work)(void*), void* ctx);

  template <typename F>
  bool TryHelp(int helpers, const F& f) {
    return TryHelp(helpers, [](void* p) { (*static_cast<const F*>(p))(); }, const_cast<F*>(&f));
  }

 private:
  SpinPool() = default;
  void Grow(int helpers);  // under busy_
  void Loop(int index, uint64_t seen);  // seen: the region count at creation

  static constexpr int64_t kClosed = int64_t{1} << 40;
  std::atomic<bool> busy_{false};      // a caller is inside TryHelp
  std::atomic<uint64_t> region_{0};    // bumped to start a region
  std::atomic<int64_t> joined_{0};     // helpers in this region; >= kClosed once closed
  std::atomic<int64_t> finished_{0};   // helpers of this region that returned
  std::atomic<int> sleepers_{0};
  void (*work_)(void*) = nullptr;      // written before joined_ is reset
  void* ctx_ = nullptr;
  int helpers_wanted_ = 0;             // helpers with index >= this sit out
  int threads_made_ = 0;
  std::mutex mu_;                      // for sleeping helpers only
  std::condition_variable wake_;
};

// True on a SpinPool thread.
bool OnSpinPoolThread();

// Microseconds an idle helper spins before it sleeps: PDSERVE_POOL_SPIN_US
// (0-100000), else 200. Read once. It always pauses its first 20 us.
int SpinPoolSpinUs();

// False when PDSERVE_SPIN_POOL=0: TryHelp then refuses every region, and
// ForEachChunk runs its regions on OpenMP's threads as before the pool (for
// comparisons, and a way back if the pool misbehaves somewhere). Read once.
bool SpinPoolEnabled();

// "decode regions on pdserve's spin pool (idle helpers spin 200 us)", or
// "decode regions on OpenMP (PDSERVE_SPIN_POOL=0)".
std::string SpinPoolSummary();

}  // namespace pdserve

// ThreadScope<T>: a pointer that a scope puts in place for the calling
// thread and restores on exit (scopes nest), read with Current(). The
// Transformer puts its weight packs in scope this way for one forward
// (ScopedPackedF32 in gemm_dnnl.h, ScopedKMajorPacks in kmajor_packs.h), so
// the kernels below Linear find them without a parameter on every call.
#pragma once

namespace pdserve {

template <typename T>
class ThreadScope {
 public:
  explicit ThreadScope(const T* value) : previous_(current_) { current_ = value; }  // nullptr: none
  ~ThreadScope() { current_ = previous_; }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

  // What the innermost live scope of this thread holds; nullptr outside any.
  static const T* Current() { return current_; }

 private:
  static inline thread_local const T* current_ = nullptr;
  const T* previous_;
};

}  // namespace pdserve

// TSan builds only (tests/sanitize_tests.cmake links it into the TSan-run test binaries).
//
// Debian's abseil is not built with -fsanitize=thread, so absl::Mutex (and gRPC's
// grpc_core::Mutex on top of it) synchronises through atomics and futexes TSan cannot see:
// every field guarded by an absl::Mutex then looks racy. This file interposes the exported
// absl::Mutex / absl::CondVar entry points (the executable's definitions win over the
// shared library's), forwards each to the real one (dlsym RTLD_NEXT) and tells TSan what
// happened with its mutex annotations, as an abseil built with TSan does itself.
// Await/CondVar::Wait release and re-take the mutex while they wait: annotated as an unlock
// before the call and a lock after it.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

void* Real(const char* mangled) {
  void* f = dlsym(RTLD_NEXT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "absl_tsan_shim: %s not found: %s\n", mangled, dlerror());
    std::abort();
  }
  return f;
}

#define PDSERVE_REAL(type, mangled) \
  static const auto real = reinterpret_cast<type>(Real(mangled))

thread_local int depth = 0;
void PreUnlock(absl::Mutex* mu, unsigned flags) { if (depth == 1) __tsan_mutex_pre_unlock(mu, flags); }
void PostUnlock(absl::Mutex* mu, unsigned flags) { if (depth == 1) __tsan_mutex_post_unlock(mu, flags); }
void PreLock(absl::Mutex* mu, unsigned flags) { if (depth == 1) __tsan_mutex_pre_lock(mu, flags); }
void PostLock(absl::Mutex* mu, unsigned flags) { if (depth == 1) __tsan_mutex_post_lock(mu, flags, 0); }

// Await* and CondVar::Wait* keep the caller's mode (writer or reader); TSan's reader
// annotation only matters for its lock-order checks, so they are annotated as writer holds.
// The library's own entry points call each other (WaitWithTimeout -> WaitWithDeadline,
// Notification -> Lock, ...) and those calls are interposed too: only the outermost call of a
// thread is annotated.
struct Outer {
  Outer() { ++depth; }
  ~Outer() { --depth; }
};

void Released(absl::Mutex* mu) {
  PreUnlock(mu, 0);
  PostUnlock(mu, 0);
}
void Retaken(absl::Mutex* mu) {
  PreLock(mu, 0);
  PostLock(mu, 0);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

// ~Mutex is left alone: TSan drops a mutex's state when its memory is freed, and an
// explicit destroy annotation races with gRPC's invisible reference counting.

void Mutex::Lock() {
  PDSERVE_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  Outer outer;
  PreLock(this, 0);
  real(this);
  PostLock(this, 0);
}

void Mutex::ReaderLock() {
  PDSERVE_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  Outer outer;
  PreLock(this, __tsan_mutex_read_lock);
  real(this);
  PostLock(this, __tsan_mutex_read_lock);
}

bool Mutex::TryLock() {
  PDSERVE_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  Outer outer;
  PreLock(this, __tsan_mutex_try_lock);
  const bool ok = real(this);
  PostLock(this, __tsan_mutex_try_lock | (ok ? 0 : __tsan_mutex_try_lock_failed));
  return ok;
}

bool Mutex::ReaderTryLock() {
  PDSERVE_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  Outer outer;
  const unsigned flags = __tsan_mutex_read_lock | __tsan_mutex_try_lock;
  PreLock(this, flags);
  const bool ok = real(this);
  PostLock(this, flags | (ok ? 0 : __tsan_mutex_try_lock_failed));
  return ok;
}

void Mutex::Unlock() {
  PDSERVE_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  Outer outer;
  PreUnlock(this, 0);
  real(this);
  PostUnlock(this, 0);
}

void Mutex::ReaderUnlock() {
  PDSERVE_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Outer outer;
  PreUnlock(this, __tsan_mutex_read_lock);
  real(this);
  PostUnlock(this, __tsan_mutex_read_lock);
}

void Mutex::LockWhen(const Condition& cond) {
  PDSERVE_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  Outer outer;
  PreLock(this, 0);
  real(this, cond);
  PostLock(this, 0);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  PDSERVE_REAL(bool (*)(Mutex*, const Condition&, Time),
               "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outer outer;
  PreLock(this, 0);
  const bool ok = real(this, cond, deadline);
  PostLock(this, 0);
  return ok;
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  PDSERVE_REAL(bool (*)(Mutex*, const Condition&, Duration),
               "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outer outer;
  PreLock(this, 0);
  const bool ok = real(this, cond, timeout);
  PostLock(this, 0);
  return ok;
}

void Mutex::Await(const Condition& cond) {
  PDSERVE_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Outer outer;
  Released(this);
  real(this, cond);
  Retaken(this);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  PDSERVE_REAL(bool (*)(Mutex*, const Condition&, Time),
               "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outer outer;
  Released(this);
  const bool ok = real(this, cond, deadline);
  Retaken(this);
  return ok;
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  PDSERVE_REAL(bool (*)(Mutex*, const Condition&, Duration),
               "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outer outer;
  Released(this);
  const bool ok = real(this, cond, timeout);
  Retaken(this);
  return ok;
}

void CondVar::Wait(Mutex* mu) {
  PDSERVE_REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Outer outer;
  Released(mu);
  real(this, mu);
  Retaken(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  PDSERVE_REAL(bool (*)(CondVar*, Mutex*, Duration),
               "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Outer outer;
  Released(mu);
  const bool timed_out = real(this, mu, timeout);
  Retaken(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  PDSERVE_REAL(bool (*)(CondVar*, Mutex*, Time),
               "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Outer outer;
  Released(mu);
  const bool timed_out = real(this, mu, deadline);
  Retaken(mu);
  return timed_out;
}

// BlockingCounter and Notification publish through atomics inside the library: a release
// on the object before each decrement/notify, an acquire after each wait.
bool BlockingCounter::DecrementCount() {
  PDSERVE_REAL(bool (*)(BlockingCounter*), "_ZN4absl7debian315BlockingCounter14DecrementCountEv");
  __tsan_release(this);
  return real(this);
}

void BlockingCounter::Wait() {
  PDSERVE_REAL(void (*)(BlockingCounter*), "_ZN4absl7debian315BlockingCounter4WaitEv");
  real(this);
  __tsan_acquire(this);
}

void Notification::Notify() {
  PDSERVE_REAL(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}

void Notification::WaitForNotification() const {
  PDSERVE_REAL(void (*)(const Notification*), "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  PDSERVE_REAL(bool (*)(const Notification*, Duration),
               "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool ok = real(this, timeout);
  __tsan_acquire(const_cast<Notification*>(this));
  return ok;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  PDSERVE_REAL(bool (*)(const Notification*, Time),
               "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool ok = real(this, deadline);
  __tsan_acquire(const_cast<Notification*>(this));
  return ok;
}

ABSL_NAMESPACE_END
}  // namespace absl

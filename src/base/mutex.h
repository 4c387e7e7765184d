// Mutex, SharedMutex, their scoped locks and CondVar: Mutex and friends with clang's
// thread-safety attributes, so that a clang build with -Wthread-safety checks every
// GUARDED_BY member at compile time (libstdc++'s own mutexes carry no attributes).
//
// Rules the analysis enforces (see the clang "Thread Safety Analysis" documentation):
//   - a member declared `T x GUARDED_BY(mu_);` is read or written only with mu_ held;
//   - a function declared REQUIRES(mu_) is called only with mu_ held, EXCLUDES(mu_) only
//     without it;
//   - a lambda that reads guarded members under a lock its caller holds says so:
//     `cv_.wait(lk, [&]() REQUIRES(mu_) { return stop_; });`.
// The build checks with -Wno-thread-safety-precise: where one lock guards a group of
// objects (an NI's lock over its paths and connection states: GUARDED_BY(ni->mu) on a
// Path, on a ConnState; the RPC engine's over its calls: GUARDED_BY(eng->mu_)), clang
// cannot prove that two pointers reach the same lock, so holding a lock of the named
// member is accepted; holding none is still an error.
// Under GCC the attributes expand to nothing and these are the std types at no cost.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define PFSNET_TSA(x) __attribute__((x))
#else
#define PFSNET_TSA(x)
#endif

#define CAPABILITY(x) PFSNET_TSA(capability(x))
#define SCOPED_CAPABILITY PFSNET_TSA(scoped_lockable)
#define GUARDED_BY(x) PFSNET_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) PFSNET_TSA(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) PFSNET_TSA(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) PFSNET_TSA(acquired_after(__VA_ARGS__))
#define REQUIRES(...) PFSNET_TSA(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) PFSNET_TSA(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) PFSNET_TSA(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) PFSNET_TSA(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) PFSNET_TSA(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) PFSNET_TSA(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) PFSNET_TSA(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) PFSNET_TSA(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) PFSNET_TSA(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) PFSNET_TSA(assert_capability(x))
#define RETURN_CAPABILITY(x) PFSNET_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS PFSNET_TSA(no_thread_safety_analysis)

namespace pfsnet {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { m_.lock(); }
  void unlock() RELEASE() { m_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return m_.try_lock(); }
  // Tells the analysis the caller holds this mutex: for a callback run by code that
  // took it (a drain loop, a std::function) where clang cannot see the lock. No check
  // at run time.
  void assert_held() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex m_;
};

// Holds a Mutex for its scope; unlock() and lock() let a loop drop it around a callback.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lk_(mu.m_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() RELEASE() { lk_.unlock(); }
  void lock() ACQUIRE() { lk_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lk_;
};

// A condition variable over MutexLock. Predicates that read guarded members are
// annotated REQUIRES(the mutex), which the wait holds whenever it calls them.
class CondVar {
 public:
  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

  void wait(MutexLock& lk) { cv_.wait(lk.lk_); }
  template <class Pred>
  void wait(MutexLock& lk, Pred pred) {
    cv_.wait(lk.lk_, std::move(pred));
  }
  template <class Rep, class Period>
  std::cv_status wait_for(MutexLock& lk, std::chrono::duration<Rep, Period> d) {
    return cv_.wait_for(lk.lk_, d);
  }
  template <class Rep, class Period, class Pred>
  bool wait_for(MutexLock& lk, std::chrono::duration<Rep, Period> d, Pred pred) {
    return cv_.wait_for(lk.lk_, d, std::move(pred));
  }

 private:
  std::condition_variable cv_;
};

// A reader-writer mutex: WriterLock for exclusive, ReaderLock for shared holders.
class CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ACQUIRE() { m_.lock(); }
  void unlock() RELEASE() { m_.unlock(); }
  void lock_shared() ACQUIRE_SHARED() { m_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { m_.unlock_shared(); }

 private:
  std::shared_mutex m_;
};

class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() RELEASE() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace pfsnet

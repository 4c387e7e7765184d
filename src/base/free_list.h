// Per-thread free lists for the few objects every frame allocates and frees (a message in
// Net, an outgoing frame, a reply's completion). glibc's per-thread cache holds 7 blocks of
// a size; a burst of 64 RPCs frees 64 of each, and the rest went through malloc's locked
// paths (_int_free, _int_malloc: a fifth of a small RPC's instructions on the server).
//
// A class opts in with PFSNET_THREAD_FREE_LIST(Class): its operator new takes a block from
// the calling thread's list, else from ::operator new; its operator delete gives the block
// to the calling thread's list while it holds fewer than kMax, else to ::operator delete.
// A block freed on another thread than the one that made it simply joins that thread's
// list: every block is plain ::operator new memory of sizeof(Class). A derived class of
// another size, and every build under a sanitizer (which must see each allocation), go to
// ::operator new and delete directly. A thread's blocks are freed when it exits.
// Thread safety: each list is its thread's own.
#pragma once

#include <cstddef>
#include <new>

#include "base/sanitizers.h"

namespace pfsnet {

template <class T, size_t kMax = 256>
class ThreadFreeList {
 public:
  static void* allocate(size_t n) {
    if constexpr (kPassThrough) return ::operator new(n);
    List& l = list_;
    if (n != sizeof(T) || !l.head) return ::operator new(n);
    Node* b = l.head;
    l.head = b->next;
    --l.count;
    return b;
  }
  static void release(void* p, size_t n) noexcept {
    if constexpr (kPassThrough) return ::operator delete(p);
    List& l = list_;
    if (n != sizeof(T) || l.count >= kMax) return ::operator delete(p);
    if (l.count == 0 && !l.drain_armed) arm_drain();
    l.head = new (p) Node{l.head};
    ++l.count;
  }

  // How many blocks the calling thread's list holds (for tests).
  static size_t cached() { return list_.count; }

 private:
  static constexpr bool kPassThrough = PFSNET_UNDER_ASAN || PFSNET_UNDER_TSAN;
  static_assert(sizeof(T) >= sizeof(void*));
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  struct Node {
    Node* next;
  };
  // Trivially destructible, so a block freed while the thread's other thread_locals are
  // destroyed still finds it; the drainer below empties it and closes it (count = kMax:
  // later blocks go to ::operator delete).
  struct List {
    Node* head = nullptr;
    size_t count = 0;
    bool drain_armed = false;
  };
  struct Drain {
    ~Drain() {
      List& l = list_;
      while (l.head) {
        Node* b = l.head;
        l.head = b->next;
        ::operator delete(b);
      }
      l.count = kMax;
    }
  };
  static void arm_drain() {
    list_.drain_armed = true;
    thread_local Drain drain;
    (void)drain;
  }
  static inline thread_local List list_;
};

// An allocator over ThreadFreeList for the containers and shared objects of a hot path
// (std::map nodes, std::allocate_shared): single objects come from the list of their
// type, arrays from ::operator new.
template <class T>
struct FreeListAllocator {
  using value_type = T;
  FreeListAllocator() = default;
  template <class U>
  FreeListAllocator(const FreeListAllocator<U>&) {}  // NOLINT(google-explicit-constructor)
  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(ThreadFreeList<T>::allocate(sizeof(T)));
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n == 1) return ThreadFreeList<T>::release(p, sizeof(T));
    ::operator delete(p);
  }
  template <class U>
  bool operator==(const FreeListAllocator<U>&) const {
    return true;
  }
};

}  // namespace pfsnet

// In a class's body: its objects come from and go back to ThreadFreeList<Class>.
#define PFSNET_THREAD_FREE_LIST(Class)                                                         \
  static void* operator new(size_t n) { return ::pfsnet::ThreadFreeList<Class>::allocate(n); } \
  static void operator delete(void* p, size_t n) noexcept {                                    \
    ::pfsnet::ThreadFreeList<Class>::release(p, n);                                            \
  }

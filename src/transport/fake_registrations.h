// Fake memory registrations for the tests of RegPool and RegCache: handles are counted,
// and each must be unregistered exactly once. Not thread-safe (one test thread).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pfsnet {

struct FakeRegistrations {
  int next = 1;
  std::vector<int> live;
  int regs = 0, unregs = 0;
  bool fail = false;
  // RegPool::Hooks or RegCache::Hooks.
  template <class Hooks>
  Hooks hooks() {
    return {[this](const uint8_t*, size_t) -> void* {
              if (fail) return nullptr;
              ++regs;
              live.push_back(next);
              return reinterpret_cast<void*>(static_cast<intptr_t>(next++));
            },
            [this](void* h) {
              ++unregs;
              auto it = std::find(live.begin(), live.end(),
                                  static_cast<int>(reinterpret_cast<intptr_t>(h)));
              ASSERT_NE(it, live.end()) << "unregistered twice or never registered";
              live.erase(it);
            }};
  }
};

}  // namespace pfsnet

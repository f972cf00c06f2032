// Multi-rank test helpers: ranks as threads of one process over a memory store (the fast
// path for the collective matrix), and naive references for what each collective must produce.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/group.h"
#include "comm/store.h"

namespace cann::test {

// A store shared by the threads of one test, under a name unique to the call.
inline std::shared_ptr<comm::Store> fresh_memory_store() {
  static std::atomic<int> counter{0};
  auto s = comm::open_store("memory://test-" + std::to_string(counter.fetch_add(1)));
  return s.ok() ? *s : nullptr;
}

// Runs fn(rank) on `world` threads and joins them all. Failures inside fn are reported through
// gtest assertions (gtest assertions are thread-safe on Linux).
inline void run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// Creates one group per rank (each on its own thread) and runs fn(rank, group).
inline void run_group(const std::string& backend, int world,
                      const std::function<void(int, comm::Group&)>& fn,
                      std::function<void(comm::GroupConfig&)> tweak = {}) {
  auto store = fresh_memory_store();
  run_ranks(world, [&](int rank) {
    comm::GroupConfig c;
    c.backend = backend;
    c.store = store;
    c.prefix = "test/" + backend;
    c.rank = rank;
    c.size = world;
    c.timeout = std::chrono::seconds(30);
    if (tweak) tweak(c);
    auto g = comm::create_group(c);
    if (!g.ok()) {
      ADD_FAILURE() << "rank " << rank << ": " << g.status().message();
      return;
    }
    fn(rank, **g);
  });
}

}  // namespace cann::test

// Spin-then-yield-then-nap waiting with peer liveness checks (see shm_wait.h).
#include "comm/shm_wait.h"

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace cann::comm::shm {

namespace {

using Clock = std::chrono::steady_clock;

// Backoff schedule. Spinning covers the common case, a peer a few microseconds behind; yielding
// lets another runnable rank on this core catch up; past a millisecond the peer is busy with
// something long (compute, a slow rank), and 50 us naps cost little latency and no core.
constexpr auto kSpinFor = std::chrono::microseconds(30);
constexpr auto kYieldFor = std::chrono::milliseconds(1);
constexpr long kNapNanos = 50'000;
// How often a waiter checks that the ranks it waits on are alive: well within the ~100 ms in
// which a peer's death must be reported, and cheap (one kill() and one small /proc read).
constexpr auto kCheckEvery = std::chrono::milliseconds(10);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A process that exited but was not reaped yet is a zombie: kill(pid, 0) still succeeds, but it
// will never run again. /proc/<pid>/stat reads "pid (comm) S ..."; comm may itself contain
// spaces and parentheses, so the state is the first field after the last ')'.
bool is_zombie(int pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return errno == ENOENT;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr || close_paren[1] != ' ') return false;
  return close_paren[2] == 'Z' || close_paren[2] == 'X';
}

bool process_gone(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  return is_zombie(pid);
}

}  // namespace

uint64_t pid_namespace_id() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

PeerWatch::PeerWatch(const ShmSegment& segment)
    : segment_(segment), my_pid_namespace_(pid_namespace_id()) {}

std::string PeerWatch::describe(int rank) const {
  const int pid = segment_.control(rank).pid.load(std::memory_order_acquire);
  return "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
}

std::optional<std::string> PeerWatch::why_stuck(int rank) const {
  const ControlBlock& c = segment_.control(rank);
  switch (static_cast<RankState>(c.state.load(std::memory_order_acquire))) {
    case RankState::kAbsent:
      return std::nullopt;
    case RankState::kAborted: {
      const size_t len = strnlen(c.reason, sizeof(c.reason));
      return describe(rank) + " failed first: " + std::string(c.reason, len);
    }
    case RankState::kClosed:
      return describe(rank) + " destroyed its group before this call completed";
    case RankState::kActive:
      break;
  }
  // Pids only mean something inside one pid namespace (containers sharing /dev/shm may differ);
  // across namespaces the timeout is the only signal.
  const uint64_t ns = c.pid_namespace.load(std::memory_order_relaxed);
  if (ns == 0 || ns != my_pid_namespace_) return std::nullopt;
  const int pid = c.pid.load(std::memory_order_relaxed);
  if (pid > 0 && process_gone(pid)) return describe(rank) + " died";
  return std::nullopt;
}

Status wait_for(std::span<WaitTarget> targets, const PeerWatch& peers, const std::string& what,
                std::chrono::milliseconds timeout) {
  // Reached targets are swapped behind `pending`; counters only grow, so they stay reached.
  size_t pending = targets.size();
  auto sweep = [&] {
    for (size_t i = 0; i < pending;) {
      if (targets[i].counter->load(std::memory_order_acquire) >= targets[i].at_least)
        std::swap(targets[i], targets[--pending]);
      else
        ++i;
    }
    return pending == 0;
  };
  if (sweep()) return OkStatus();

  const auto start = Clock::now();
  auto now = start;
  while (now - start < kSpinFor) {
    for (int i = 0; i < 64; ++i) {
      cpu_relax();
      if (sweep()) return OkStatus();
    }
    now = Clock::now();
  }
  const auto deadline = start + timeout;
  auto next_check = now;
  while (true) {
    if (now >= next_check) {
      // A peer publishes its counters before it closes, aborts or exits, and why_stuck reads its
      // state with acquire, so a counter read after that sees all the peer will ever publish:
      // a stuck peer that had already reached its target is no reason to fail.
      for (size_t i = 0; i < pending; ++i) {
        auto why = peers.why_stuck(targets[i].rank);
        if (why && targets[i].counter->load(std::memory_order_acquire) < targets[i].at_least)
          return IoError(what + ": " + *why);
      }
      next_check = now + kCheckEvery;
    }
    if (now >= deadline) {
      std::vector<int> missing;
      for (size_t i = 0; i < pending; ++i) missing.push_back(targets[i].rank);
      std::sort(missing.begin(), missing.end());
      missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
      std::string names;
      for (int r : missing) names += (names.empty() ? "" : ", ") + peers.describe(r);
      return IoError(what + ": timed out after " + std::to_string(timeout.count()) +
                     " ms waiting for " + names +
                     "; hint: those ranks are stuck, slower than the timeout, or issued a "
                     "different collective (GroupConfig::debug_checks names a mismatch)");
    }
    if (now - start < kYieldFor) {
      sched_yield();
    } else {
      const timespec nap{0, kNapNanos};
      nanosleep(&nap, nullptr);
    }
    if (sweep()) return OkStatus();
    now = Clock::now();
  }
}

}  // namespace cann::comm::shm

// Stop signals caught off the compute threads (core/stop_signals.h): the masks and handlers it
// sets and restores, a signal sent to the process reaching the catcher, and GEMMs under a storm
// of caught signals leaving the heap whole.
#include <gtest/gtest.h>
#include <omp.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/stop_signals.h"
#include "core/threads.h"
#include "kernels/cpu/gemm.h"

namespace cann {
namespace {

bool blocked_here(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, sig) == 1;
}

// How many of the OpenMP team's threads, the calling one included, block sig.
int team_blocking(int sig) {
  std::atomic<int> n{0};
#pragma omp parallel num_threads(num_threads())
  {
    if (blocked_here(sig)) ++n;
  }
  return n.load();
}

bool handler_is(int sig, void (*h)(int)) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler == h;
}

TEST(StopSignalsTest, ComputeThreadsBlockThemAndTheCatcherTakesThem) {
  set_num_threads(3);
  ASSERT_EQ(team_blocking(SIGUSR1), 0);
  struct sigaction before {};
  sigaction(SIGUSR1, nullptr, &before);
  {
    StopSignals stop({SIGUSR1, SIGUSR2});
    EXPECT_EQ(StopSignals::caught(), 0);
    EXPECT_TRUE(blocked_here(SIGUSR1));
    EXPECT_TRUE(blocked_here(SIGUSR2));
    EXPECT_EQ(team_blocking(SIGUSR1), 3);
    EXPECT_EQ(team_blocking(SIGTERM), 0);  // only the signals named
    // Sent to the process, the signal lands on the one thread that takes it.
    ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
    for (int i = 0; i < 200 && StopSignals::caught() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(StopSignals::caught(), SIGUSR2);
    StopSignals::clear();
    EXPECT_EQ(StopSignals::caught(), 0);
  }
  EXPECT_FALSE(blocked_here(SIGUSR1));
  EXPECT_EQ(team_blocking(SIGUSR1), 0);
  EXPECT_TRUE(handler_is(SIGUSR1, before.sa_handler));
  set_num_threads(0);
}

// GEMMs of the sizes a small model runs, while a thread sends the process caught signals as
// fast as it takes them; returns 0 when every product came out right and the signals arrived.
int gemms_under_a_signal_storm() {
  set_num_threads(2);
  // Ignored once the catcher is gone, so that a signal still on its way then does not end the
  // child.
  std::signal(SIGUSR1, SIG_IGN);
  StopSignals stop({SIGUSR1});
  std::atomic<bool> done{false};
  std::thread storm([&] {
    while (!done) {
      kill(getpid(), SIGUSR1);
      usleep(20);
    }
  });
  const int shapes[][3] = {{256, 128, 128}, {256, 512, 128}, {32, 384, 128}, {256, 786, 128}};
  bool right = true;
  for (int it = 0; it < 150 && right; ++it) {
    for (const auto& s : shapes) {
      const int M = s[0], N = s[1], K = s[2];
      std::vector<float> A(static_cast<size_t>(M) * K, 0.5f), B(static_cast<size_t>(K) * N, 0.25f);
      std::vector<float> C(static_cast<size_t>(M) * N);
      kernels::gemm(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, C.data(), N);
      kernels::gemm(true, false, M, N, K, A.data(), M, B.data(), N, 0.0f, C.data(), N);
      kernels::gemm(false, true, M, N, K, A.data(), K, B.data(), K, 0.0f, C.data(), N);
      right = right && C.front() == 0.125f * K && C.back() == 0.125f * K;
    }
  }
  done = true;
  storm.join();
  return right && StopSignals::caught() == SIGUSR1 ? 0 : 3;
}

// In a child process. With a handler that may run on a computing thread instead, this process
// aborted in free() within 0.1 s on an AVX-512 machine (a signal frame written over the heap);
// here every product stays right and the child exits cleanly.
TEST(StopSignalsTest, GemmsUnderAStormOfCaughtSignalsLeaveTheHeapWhole) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(gemms_under_a_signal_storm()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace cann

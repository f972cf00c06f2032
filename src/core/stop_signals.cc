// Stop signals caught off the compute threads; see stop_signals.h.
#include "core/stop_signals.h"

#include <pthread.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/threads.h"

namespace cann {
namespace {

volatile std::sig_atomic_t g_caught = 0;

void on_signal(int sig) {
  g_caught = sig;
}

// In every thread of the OpenMP team (which runs BLAS and oneDNN) but the calling one.
void mask_team(int how, const sigset_t& set) {
  struct Args {
    int how;
    const sigset_t* set;
  } a{how, &set};
  on_openmp_workers(
      [](void* p) {
        const Args& args = *static_cast<const Args*>(p);
        pthread_sigmask(args.how, args.set, nullptr);
      },
      &a);
}

}  // namespace

struct StopSignals::Catcher {
  std::vector<int> signals;
  std::vector<struct sigaction> old;
  sigset_t set{};
  sigset_t caller_mask{};  // the calling thread's, restored at the end
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::thread thread;
};

StopSignals::StopSignals(std::vector<int> signals) : catcher_(std::make_unique<Catcher>()) {
  Catcher& c = *catcher_;
  c.signals = std::move(signals);
  c.old.resize(c.signals.size());
  sigemptyset(&c.set);
  for (int s : c.signals) sigaddset(&c.set, s);
  g_caught = 0;
  // The catching thread starts with the signals unblocked (it inherits this thread's mask,
  // which blocks them only below): while it lives, a signal always has a thread to land on.
  c.thread = std::thread([&c] {
    pthread_sigmask(SIG_UNBLOCK, &c.set, nullptr);
    std::unique_lock<std::mutex> lock(c.mutex);
    c.cv.wait(lock, [&c] { return c.done; });
  });
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < c.signals.size(); ++i) sigaction(c.signals[i], &sa, &c.old[i]);
  pthread_sigmask(SIG_BLOCK, &c.set, &c.caller_mask);
  mask_team(SIG_BLOCK, c.set);
}

StopSignals::~StopSignals() {
  Catcher& c = *catcher_;
  // Unblocked first, with the handler still in place: a signal pending now lands on it.
  mask_team(SIG_UNBLOCK, c.set);
  pthread_sigmask(SIG_SETMASK, &c.caller_mask, nullptr);
  for (size_t i = 0; i < c.signals.size(); ++i) sigaction(c.signals[i], &c.old[i], nullptr);
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.done = true;
  }
  c.cv.notify_all();
  c.thread.join();
}

int StopSignals::caught() {
  return g_caught;
}

void StopSignals::clear() {
  g_caught = 0;
}

}  // namespace cann

// Signals that ask a process to stop (SIGINT, SIGTERM, an elastic agent's SIGUSR1), caught
// on a thread that runs no kernels.
//
// The kernel writes a caught signal's frame (return address, registers, and the x87/SSE/AVX
// state: about 3 KiB on AVX-512) below the stack pointer of the thread the signal interrupts.
// oneDNN's JIT GEMM kernels can run with the stack pointer inside a heap buffer, and a signal
// that lands there writes its frame over the heap. Seen in an elastic worker told to stop
// with SIGUSR1 while it trained: it later aborted in free() ("corrupted size vs. prev_size"),
// and its core held the frame (return to __restore_rt, RIP in JIT code, RSP in the brk heap)
// over a malloc chunk's header. So a StopSignals blocks its signals in the compute threads
// (the calling thread, which every thread it starts afterwards inherits, and the OpenMP team,
// which may have started before), and keeps one thread of its own with them unblocked, on
// which the handler runs. Threads other than those two kinds may run the handler too; they
// run compiled code on their own stacks.
//
// One StopSignals at a time in a process; the destructor restores the handlers and masks.
#pragma once

#include <csignal>
#include <memory>
#include <vector>

namespace cann {

class StopSignals {
 public:
  explicit StopSignals(std::vector<int> signals);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The newest signal caught, 0 if none since the start or the last clear().
  static int caught();
  static void clear();

 private:
  struct Catcher;
  std::unique_ptr<Catcher> catcher_;
};

}  // namespace cann

// The per-step progress line: iteration, consumed samples, loss, learning rate, gradient norm,
// tokens/s, ms per iteration, achieved TFLOP/s per device and ETA. On a terminal it redraws in
// place (carriage return and clear); into a pipe or file it prints one plain line per step, so
// logs stay readable.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace cann::train {

struct StepReport {
  int step = 0;  // 1-based, completed
  int total = 0;
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  double step_time_s = 0.0;
  double tokens_per_s = 0.0;
  double gflops = 0.0;  // achieved model GFLOP/s, all ranks together
  double eta_s = 0.0;
  int64_t samples = 0;             // global samples consumed so far (across resumes)
  double tflops_per_device = 0.0;  // achieved model TFLOP/s per rank
};

class Progress {
 public:
  explicit Progress(FILE* out = stdout);
  void step(const StepReport& r);
  // A line that stays (evaluation results, checkpoints, warnings): clears a pending redraw.
  void line(const std::string& text);
  void finish();

  static std::string format_duration(double seconds);

 private:
  FILE* out_;
  bool tty_;
  bool pending_ = false;
};

}  // namespace cann::train

// Progress line formatting.
#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace cann::train {

// CANN_TRAIN_TTY=1: the agent forwards this worker's output to a terminal through a pipe.
Progress::Progress(FILE* out)
    : out_(out),
      tty_(isatty(fileno(out)) != 0 || (std::getenv("CANN_TRAIN_TTY") != nullptr &&
                                        std::strcmp(std::getenv("CANN_TRAIN_TTY"), "1") == 0)) {}

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const long t = std::lround(s);
  if (t >= 3600)
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lds", t);
  return buf;
}

void Progress::step(const StepReport& r) {
  const int width = static_cast<int>(std::to_string(r.total).size());
  // TFLOP/s with three significant digits: 0.0123 on a CPU, 312 on an accelerator.
  std::fprintf(out_,
               "%sstep %*d/%d | samples %lld | loss %.4f | lr %.2e | norm %.2f | %.0f tok/s | "
               "%.1f ms/it | %.3g TFLOP/s/device | ETA %s%s",
               tty_ ? "\r\033[K" : "", width, r.step, r.total, static_cast<long long>(r.samples),
               r.loss, r.lr, r.grad_norm, r.tokens_per_s, r.step_time_s * 1e3, r.tflops_per_device,
               format_duration(r.eta_s).c_str(), tty_ ? "" : "\n");
  std::fflush(out_);
  pending_ = tty_;
}

void Progress::line(const std::string& text) {
  std::fprintf(out_, "%s%s\n", pending_ ? "\r\033[K" : "", text.c_str());
  std::fflush(out_);
  pending_ = false;
}

void Progress::finish() {
  if (pending_) std::fprintf(out_, "\n");
  std::fflush(out_);
  pending_ = false;
}

}  // namespace cann::train

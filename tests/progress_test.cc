// The rank-0 progress line: every field (iteration, consumed samples, ms/iteration, tokens/s,
// TFLOP/s per device, learning rate, loss, grad norm, ETA); plain lines into a file, an
// in-place redraw on a terminal (CANN_TRAIN_TTY=1 is how the agent says "a terminal").
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "test_util.h"
#include "train/progress.h"

namespace cann::train {
namespace {

std::string render(bool tty, const std::vector<StepReport>& steps, const char* extra_line) {
  if (tty)
    setenv("CANN_TRAIN_TTY", "1", 1);
  else
    unsetenv("CANN_TRAIN_TTY");
  std::FILE* f = std::tmpfile();
  {
    Progress p(f);
    for (const auto& r : steps) p.step(r);
    if (extra_line != nullptr) p.line(extra_line);
    p.finish();
  }
  unsetenv("CANN_TRAIN_TTY");
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

StepReport report(int step) {
  StepReport r;
  r.step = step;
  r.total = 100;
  r.loss = 2.5;
  r.lr = 3e-4;
  r.grad_norm = 0.75;
  r.step_time_s = 0.125;
  r.tokens_per_s = 32768;
  r.eta_s = 125;
  r.samples = 16LL * step;
  r.tflops_per_device = 0.0123;
  return r;
}

TEST(ProgressTest, PlainLinesCarryEveryField) {
  const std::string out = render(false, {report(7)}, nullptr);
  EXPECT_EQ(out,
            "step   7/100 | samples 112 | loss 2.5000 | lr 3.00e-04 | norm 0.75 | 32768 tok/s | "
            "125.0 ms/it | 0.0123 TFLOP/s/device | ETA 2m05s\n");
}

TEST(ProgressTest, TerminalRedrawsInPlace) {
  const std::string out = render(true, {report(1), report(2)}, "checkpoint saved");
  // Each step clears the line and redraws without a newline; a lasting line clears the
  // pending redraw and ends with one.
  EXPECT_EQ(out.rfind("\r\033[Kstep   1/100 | samples 16 |", 0), 0u) << out;
  EXPECT_NE(out.find("\r\033[Kstep   2/100 | samples 32 |"), std::string::npos) << out;
  EXPECT_EQ(out.find('\n'), out.find("checkpoint saved") + std::string("checkpoint saved").size());
  EXPECT_NE(out.find("ETA 2m05s\r\033[Kcheckpoint saved\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace cann::train

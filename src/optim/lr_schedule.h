// Learning-rate schedule: linear warmup from 0, then cosine decay to min_lr_ratio * lr at the
// last step (the GPT-3 / nanoGPT schedule).
#pragma once

namespace cann::optim {

struct LrSchedule {
  float lr = 1e-3f;
  int warmup_steps = 0;
  int total_steps = 1;
  float min_lr_ratio = 0.1f;

  // Learning rate for 0-based step `step`.
  float at(int step) const;
};

}  // namespace cann::optim

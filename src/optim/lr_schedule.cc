// Warmup + cosine decay.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace cann::optim {

float LrSchedule::at(int step) const {
  if (warmup_steps > 0 && step < warmup_steps)
    return lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  const int decay_steps = std::max(1, total_steps - warmup_steps);
  const float progress = std::clamp(
      static_cast<float>(step - warmup_steps) / static_cast<float>(decay_steps), 0.0f, 1.0f);
  const float cosine = 0.5f * (1.0f + std::cos(3.14159265358979f * progress));
  const float min_lr = lr * min_lr_ratio;
  return min_lr + (lr - min_lr) * cosine;
}

}  // namespace cann::optim

// AdamW over a model's flat buffers: the two moment buffers share the ParamTable layout, and
// weight decay applies to the tensors the table marks (matrices and embeddings, not biases or
// norm parameters).
#pragma once

#include <cstddef>
#include <functional>

#include "core/aligned_buffer.h"
#include "model/param_table.h"

namespace cann::optim {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // max global L2 norm; <= 0 disables clipping
};

// One AdamW update of the parameters at flat offsets [begin, begin + len). params, m, v and
// grads all point at that range (element 0 = flat offset `begin`), so the same code serves a
// whole buffer and a ZeRO shard. Weight decay follows the tensors the range crosses.
void adamw_update_range(const model::ParamTable& table, const AdamWConfig& config, float* params,
                        float* m, float* v, const float* grads, size_t begin, size_t len, float lr,
                        int step, float grad_scale);

class AdamW {
 public:
  AdamW(const model::ParamTable& table, AdamWConfig config);

  // One update with learning rate lr from the gradients in grads. Returns the global gradient
  // norm before clipping. Increments step().
  double step(float* params, const float* grads, float lr);

  // Replaces the local sum of squares behind the global norm, for a model whose gradients are
  // spread over several ranks (tensor parallelism): fn(grads) returns the whole model's sum.
  void set_sum_of_squares(std::function<double(const float*)> fn) { sum_of_squares_ = std::move(fn); }

  int step_count() const { return step_; }
  void set_step_count(int s) { step_ = s; }
  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  const float* m() const { return m_.data(); }
  const float* v() const { return v_.data(); }
  size_t size() const { return m_.size(); }
  const AdamWConfig& config() const { return config_; }

 private:
  const model::ParamTable& table_;
  AdamWConfig config_;
  AlignedBuffer<float> m_, v_;
  std::function<double(const float*)> sum_of_squares_;
  int step_ = 0;
};

}  // namespace cann::optim

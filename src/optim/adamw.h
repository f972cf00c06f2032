// AdamW over a model's flat buffers: the two moment buffers share the ParamTable layout, and
// weight decay applies to the tensors the table marks (matrices and embeddings, not biases or
// norm parameters).
#pragma once

#include <cstddef>
#include <functional>

#include "core/aligned_buffer.h"
#include "core/word_sum.h"
#include "model/param_table.h"

namespace cann::model {
class Model;
}

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

// The word sums (core/word_sum.h) of the parameters and both moments as an update wrote them,
// in that order; `valid` is cleared by whatever changes them afterwards.
struct StateSums {
  WordSumParts parts[3];
  bool valid = false;
};

// Where an update writes the state it produces: the parameters and both moments, each the
// whole ParamTable long, either where they are now (in place) or elsewhere, overlapping
// nothing they are read from. With `sums`, their word sums, taken while each piece of output
// is still in cache.
struct UpdateTarget {
  float* params = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  StateSums* sums = nullptr;
};

class AdamW {
 public:
  AdamW(const model::ParamTable& table, AdamWConfig config);

  // One update with learning rate lr from the gradients in grads. Returns the global gradient
  // norm before clipping. Increments step().
  double step(float* params, const float* grads, float lr);
  // The same update read from `params` and the moments, written to `to` (bit for bit what
  // step() leaves); the moments live at to.m and to.v from then on.
  double step_to(const float* params, const float* grads, float lr, const UpdateTarget& to);

  // Replaces the local sum of squares behind the global norm, for a model whose gradients are
  // spread over several ranks (tensor parallelism): fn(grads) returns the whole model's sum.
  void set_sum_of_squares(std::function<double(const float*)> fn) {
    sum_of_squares_ = std::move(fn);
  }

  int step_count() const { return step_; }
  void set_step_count(int s) { step_ = s; }
  float* m() { return m_at_; }
  float* v() { return v_at_; }
  const float* m() const { return m_at_; }
  const float* v() const { return v_at_; }
  size_t size() const { return table_.total_floats(); }
  // The moments live at m and v from now on (size() floats each, kept alive by the caller),
  // copied there first when `copy`; the buffers of its own are released. nullptr: back into
  // buffers of its own, copied from where they were.
  void place_moments(float* m, float* v, bool copy);
  const AdamWConfig& config() const { return config_; }

 private:
  const model::ParamTable& table_;
  AdamWConfig config_;
  AlignedBuffer<float> m_, v_;
  float* m_at_ = nullptr;  // m_ unless placed elsewhere; v_at_ likewise
  float* v_at_ = nullptr;
  std::function<double(const float*)> sum_of_squares_;
  int step_ = 0;
};

// One update of `model`'s parameters by `adam`: in place, or into *into when it names a target
// (UpdateTarget::params set), after which the parameters live there and into->params is
// cleared (a target serves one step).
double step_model(AdamW& adam, model::Model& model, UpdateTarget* into, float lr);
// `model`'s parameters and `adam`'s moments move to `to` now (copied), or back into buffers of
// their own (to.params null); a pending *into is dropped.
void place_model_state(AdamW& adam, model::Model& model, UpdateTarget* into,
                       const UpdateTarget& to);

}  // namespace cann::optim

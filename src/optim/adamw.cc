// AdamW driver: global norm, clip coefficient, then the fused kernel per tensor (the per-tensor
// split switches weight decay on and off and skips state that is not trained).
#include "optim/adamw.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/grad_norm.h"
#include "model/model.h"

namespace cann::optim {
namespace {

kernels::AdamWHyper hyper(const AdamWConfig& config, float lr, int step, float grad_scale) {
  kernels::AdamWHyper h{};
  h.lr = lr;
  h.beta1 = config.beta1;
  h.beta2 = config.beta2;
  h.eps = config.eps;
  h.step = step;
  h.grad_scale = grad_scale;
  return h;
}

}  // namespace

void adamw_update_range(const model::ParamTable& table, const AdamWConfig& config, float* params,
                        float* m, float* v, const float* grads, size_t begin, size_t len, float lr,
                        int step, float grad_scale) {
  kernels::AdamWHyper h = hyper(config, lr, step, grad_scale);
  const size_t end = begin + len;
  for (const model::TensorInfo& t : table.tensors()) {
    const size_t a = std::max(begin, t.offset), b = std::min(end, t.offset + t.numel);
    if (a >= b || !t.trained) continue;
    h.weight_decay = t.weight_decay ? config.weight_decay : 0.0f;
    kernels::adamw_update(params + (a - begin), m + (a - begin), v + (a - begin),
                          grads + (a - begin), b - a, h);
  }
}

AdamW::AdamW(const model::ParamTable& table, AdamWConfig config)
    : table_(table),
      config_(config),
      m_(table.total_floats()),
      v_(table.total_floats()),
      m_at_(m_.data()),
      v_at_(v_.data()) {}

void AdamW::place_moments(float* m, float* v, bool copy) {
  const size_t n = size();
  if (m == m_at_ && v == v_at_) return;
  if (m == nullptr) {
    if (m_.data() == m_at_ && v_.data() == v_at_) return;  // its own already
    AlignedBuffer<float> own_m(n), own_v(n);
    std::memcpy(own_m.data(), m_at_, n * sizeof(float));
    std::memcpy(own_v.data(), v_at_, n * sizeof(float));
    m_ = std::move(own_m);
    v_ = std::move(own_v);
    m_at_ = m_.data();
    v_at_ = v_.data();
    return;
  }
  if (copy) {
    std::memcpy(m, m_at_, n * sizeof(float));
    std::memcpy(v, v_at_, n * sizeof(float));
  }
  m_at_ = m;
  v_at_ = v;
  m_ = AlignedBuffer<float>();
  v_ = AlignedBuffer<float>();
}

double AdamW::step(float* params, const float* grads, float lr) {
  const double norm =
      std::sqrt(sum_of_squares_ ? sum_of_squares_(grads)
                                : kernels::sum_of_squares(grads, table_.total_floats()));
  ++step_;
  adamw_update_range(table_, config_, params, m_at_, v_at_, grads, 0, table_.total_floats(), lr,
                     step_, kernels::clip_coefficient(norm, config_.grad_clip));
  return norm;
}

static_assert(model::ParamTable::kAlign % 16 == 0, "step_to sums whole 64-byte blocks of tensors");

double AdamW::step_to(const float* params, const float* grads, float lr, const UpdateTarget& to) {
  if (to.params == params && to.m == m_at_ && to.v == v_at_ && to.sums == nullptr)
    return step(to.params, grads, lr);
  const size_t n = table_.total_floats();
  const double norm =
      std::sqrt(sum_of_squares_ ? sum_of_squares_(grads) : kernels::sum_of_squares(grads, n));
  ++step_;
  const kernels::AdamWHyper h =
      hyper(config_, lr, step_, kernels::clip_coefficient(norm, config_.grad_clip));
  const float* const in[3] = {params, m_at_, v_at_};
  float* const out[3] = {to.params, to.m, to.v};
  const std::vector<model::TensorInfo>& tensors = table_.tensors();
  // What lies between trained tensors (padding, state not trained) is carried over as it is.
  auto carry = [&](size_t a, size_t b) {
    for (int k = 0; k < 3; ++k)
      if (out[k] != in[k]) std::memcpy(out[k] + a, in[k] + a, (b - a) * sizeof(float));
  };
  // One contiguous range of whole blocks per thread, its sums joined in order afterwards. The
  // whole blocks of trained tensors are summed by the update as it stores them; the rest
  // (tensor tails, padding, state carried over) is read back while it is in cache.
  const int threads = n < (size_t{1} << 16) ? 1 : omp_get_max_threads();
  std::vector<WordSumParts> parts(3 * static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t per = (n + nt * 16 - 1) / (nt * 16) * 16;
    const size_t begin = std::min(n, per * static_cast<size_t>(t));
    const size_t end = std::min(n, begin + per);
    WordSumParts* sums = &parts[3 * static_cast<size_t>(t)];
    size_t summed = begin;
    auto sum_to = [&](size_t x) {
      for (int k = 0; k < 3; ++k)
        word_sum_add(&sums[k], out[k] + summed, (x - summed) * sizeof(float));
      summed = x;
    };
    // The first tensor ending after `begin` (tensors are in offset order).
    auto ti = std::upper_bound(
        tensors.begin(), tensors.end(), begin,
        [](size_t at, const model::TensorInfo& x) { return at < x.offset + x.numel; });
    kernels::AdamWHyper th = h;
    size_t at = begin;
    for (; ti != tensors.end() && ti->offset < end; ++ti) {
      const size_t a = std::max(at, ti->offset), b = std::min(end, ti->offset + ti->numel);
      if (at < a) carry(at, a);
      if (ti->trained) {
        // a is a block boundary: a thread's start or a tensor's (ParamTable::kAlign).
        th.weight_decay = ti->weight_decay ? config_.weight_decay : 0.0f;
        const size_t whole = a + (b - a) / 16 * 16;
        sum_to(a);
        kernels::adamw_update_summed(in[0] + a, in[1] + a, in[2] + a, grads + a, out[0] + a,
                                     out[1] + a, out[2] + a, whole - a, th, sums);
        summed = whole;
        if (whole < b) {  // the tail, shorter than a block: carried over, updated there
          carry(whole, b);
          kernels::adamw_update(out[0] + whole, out[1] + whole, out[2] + whole, grads + whole,
                                b - whole, th);
        }
      } else {
        carry(a, b);
      }
      at = b;
    }
    if (at < end) carry(at, end);
    sum_to(end);
  }
  if (to.sums != nullptr) {
    for (int k = 0; k < 3; ++k) {
      WordSumParts whole;
      for (int t = 0; t < threads; ++t)
        whole = word_sum_join(whole, parts[3 * static_cast<size_t>(t) + k]);
      to.sums->parts[k] = whole;
    }
    to.sums->valid = true;
  }
  place_moments(to.m, to.v, false);
  return norm;
}

double step_model(AdamW& adam, model::Model& model, UpdateTarget* into, float lr) {
  if (into->params == nullptr) return adam.step(model.params(), model.grads(), lr);
  const UpdateTarget to = *into;
  into->params = nullptr;  // one step only; the sums stay for whoever changes them next
  const double norm = adam.step_to(model.params(), model.grads(), lr, to);
  model.place_params(to.params, false);
  return norm;
}

void place_model_state(AdamW& adam, model::Model& model, UpdateTarget* into,
                       const UpdateTarget& to) {
  *into = {};
  model.place_params(to.params, true);
  adam.place_moments(to.m, to.v, true);
}

}  // namespace cann::optim

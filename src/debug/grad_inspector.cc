// Per-layer gradient norms and the first non-finite layer (see grad_inspector.h).
#include "debug/grad_inspector.h"

#include <cmath>

#include "core/json_line.h"

namespace cann::debug {

TensorGradStats tensor_grad_stats(const GradTensor& t, const float* grads) {
  TensorGradStats s;
  s.name = t.name;
  s.numel = t.numel;
  double sum = 0.0;
  const float* g = grads + t.offset;
  for (size_t i = 0; i < t.numel; ++i) {
    const float v = g[i];
    if (std::isnan(v)) {
      ++s.nan;
    } else if (std::isinf(v)) {
      ++s.inf;
    } else {
      const double a = std::fabs(static_cast<double>(v));
      sum += a * a;
      if (a > s.finite_max_abs) s.finite_max_abs = a;
    }
  }
  s.finite_norm = std::sqrt(sum);
  return s;
}

GradInspector::GradInspector(std::vector<GradLayer> layers)
    : layers_(std::move(layers)), norms_(layers_.size(), 0.0) {}

int GradInspector::inspect(const float* grads) {
  int first = -1;
  for (size_t l = 0; l < layers_.size(); ++l) {
    double sum = 0.0;
    for (const GradTensor& t : layers_[l].tensors) {
      const float* g = grads + t.offset;
      double part = 0.0;
#pragma omp simd reduction(+ : part)
      for (size_t i = 0; i < t.numel; ++i) part += static_cast<double>(g[i]) * g[i];
      sum += part;
    }
    norms_[l] = std::sqrt(sum);
    if (first < 0 && !std::isfinite(norms_[l])) first = static_cast<int>(l);
  }
  return first;
}

std::string GradInspector::norms_json() const {
  JsonLine j;
  for (size_t l = layers_.size(); l-- > 0;) j.add(layers_[l].name, norms_[l]);
  return j.str();
}

std::string GradInspector::dump_json(int layer_index, const float* grads, int step,
                                     int rank) const {
  std::string tensors = "[";
  for (const GradTensor& t : layers_[layer_index].tensors) {
    const TensorGradStats s = tensor_grad_stats(t, grads);
    JsonLine j;
    j.add("name", s.name)
        .add("numel", static_cast<int64_t>(s.numel))
        .add("nan", static_cast<int64_t>(s.nan))
        .add("inf", static_cast<int64_t>(s.inf))
        .add("finite_norm", s.finite_norm)
        .add("finite_max_abs", s.finite_max_abs);
    if (tensors.size() > 1) tensors += ",";
    tensors += j.str();
  }
  tensors += "]";
  JsonLine out;
  out.add("format", "cann-train nonfinite-gradient dump")
      .add("version", 1)
      .add("step", step)
      .add("rank", rank)
      .add("layer", layers_[layer_index].name)
      .add_raw("tensors", tensors)
      .add_raw("layer_norms", norms_json());
  return out.str();
}

}  // namespace cann::debug

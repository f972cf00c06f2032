#include "debug/grad_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ckpt/safetensors.h"

namespace cann::debug {

StatusOr<std::vector<TensorDeviation>> compare_grads(const ckpt::SafeTensors& got,
                                                     const ckpt::SafeTensors& ref,
                                                     const std::string& got_path,
                                                     const std::string& ref_path) {
  if (got.tensors.size() != ref.tensors.size())
    return InvalidArgument(got_path + " holds " + std::to_string(got.tensors.size()) +
                           " tensors, " + ref_path + " " + std::to_string(ref.tensors.size()) +
                           "; hint: compare dumps of the same model");
  std::vector<TensorDeviation> rows;
  for (const ckpt::SafeTensor& r : ref.tensors) {
    const ckpt::SafeTensor* g = got.find(r.name);
    if (g == nullptr)
      return InvalidArgument(got_path + " has no tensor " + r.name + " (in " + ref_path +
                             "); hint: compare dumps of the same model");
    if (g->shape != r.shape)
      return InvalidArgument(r.name + " has another shape in " + got_path + " than in " + ref_path +
                             "; hint: compare dumps of the same model");
    TensorDeviation d;
    d.name = r.name;
    d.numel = r.data.size();
    for (size_t i = 0; i < r.data.size(); ++i) {
      const double a = g->data[i], b = r.data[i];
      const double diff = std::isfinite(a) && std::isfinite(b) ? std::abs(a - b) : INFINITY;
      d.max_abs_diff = std::max(d.max_abs_diff, diff);
      d.ref_max_abs = std::max(d.ref_max_abs, std::abs(b));
    }
    d.relative = d.max_abs_diff == 0 ? 0.0
                 : d.ref_max_abs > 0 ? d.max_abs_diff / d.ref_max_abs
                                     : INFINITY;
    rows.push_back(d);
  }
  return rows;
}

std::string format_grad_comparison(const std::vector<TensorDeviation>& rows, double tolerance) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-28s %10s %12s %12s %12s\n", "tensor", "numel", "max |diff|",
                "ref max", "relative");
  out += buf;
  const TensorDeviation* worst = nullptr;
  int over = 0;
  for (const TensorDeviation& d : rows) {
    const bool bad = tolerance > 0 && !(d.relative <= tolerance);
    over += bad;
    if (worst == nullptr || !(d.relative <= worst->relative)) worst = &d;
    std::snprintf(buf, sizeof(buf), "%-28s %10zu %12.3e %12.3e %12.3e%s\n", d.name.c_str(), d.numel,
                  d.max_abs_diff, d.ref_max_abs, d.relative, bad ? "  over" : "");
    out += buf;
  }
  if (worst != nullptr) {
    std::snprintf(buf, sizeof(buf), "max relative deviation %.3e (%s)", worst->relative,
                  worst->name.c_str());
    out += buf;
  }
  if (tolerance > 0) {
    std::snprintf(buf, sizeof(buf), "; %d of %zu tensors over the tolerance %.1e", over,
                  rows.size(), tolerance);
    out += buf;
  }
  return out + "\n";
}

std::string format_grad_dump(const ckpt::SafeTensors& dump, const std::string& path) {
  std::string out = path + ":";
  for (const auto& [key, value] : dump.metadata) out += " " + key + "=" + value;
  out += "\n";
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-28s %10s %12s %12s %s\n", "tensor", "numel", "norm", "max |g|",
                "non-finite");
  out += buf;
  double total = 0;
  for (const ckpt::SafeTensor& t : dump.tensors) {
    double sq = 0, mx = 0;
    size_t bad = 0;
    for (float v : t.data) {
      if (!std::isfinite(v)) {
        ++bad;
        continue;
      }
      sq += static_cast<double>(v) * v;
      mx = std::max(mx, static_cast<double>(std::abs(v)));
    }
    total += sq;
    std::snprintf(buf, sizeof(buf), "%-28s %10zu %12.4e %12.4e %zu\n", t.name.c_str(),
                  t.data.size(), std::sqrt(sq), mx, bad);
    out += buf;
  }
  std::snprintf(buf, sizeof(buf), "global norm %.6e over %zu tensors\n", std::sqrt(total),
                dump.tensors.size());
  return out + buf;
}

}  // namespace cann::debug

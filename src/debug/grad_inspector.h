// GradInspector: per-layer gradient norms and the first non-finite gradient, for
// `run --grad-norms` / `--halt-on-nan`.
//
// The model's gradients live in one flat buffer; a layer is a list of tensors (name, offset,
// count) in it. Layers are given in backward order (the order backward finishes them: final
// norm, last block, ..., first block, embeddings), because a NaN that appears in layer k
// spreads to every layer backward reaches after k: the first non-finite layer in backward
// order is where it appeared.
//
// A layer's norm is sqrt(sum g^2) accumulated in double. The sum is non-finite exactly when
// some element is (a float squared is at most 1.2e77, so no finite sum overflows a double),
// so one pass gives both the norm and the check.
//
// Depends on core only. Thread safety: none; the training thread calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cann::debug {

struct GradTensor {
  std::string name;
  size_t offset = 0;  // floats from the start of the gradient buffer
  size_t numel = 0;
};

struct GradLayer {
  std::string name;  // "h.3", "embed", "ln_f"
  std::vector<GradTensor> tensors;
};

// The statistics of one tensor, for the dump written when a gradient goes non-finite.
struct TensorGradStats {
  std::string name;
  size_t numel = 0;
  size_t nan = 0;
  size_t inf = 0;
  double finite_norm = 0.0;     // norm over the finite elements
  double finite_max_abs = 0.0;  // largest finite |g|
};

TensorGradStats tensor_grad_stats(const GradTensor& t, const float* grads);

class GradInspector {
 public:
  // `layers` in backward order (see above).
  explicit GradInspector(std::vector<GradLayer> layers);

  // Computes every layer's norm from `grads`. Returns the index (into layers()) of the first
  // layer in backward order with a non-finite gradient, or -1.
  int inspect(const float* grads);

  const std::vector<GradLayer>& layers() const { return layers_; }
  // The norms of the last inspect(), one per layer (NaN or Inf for a non-finite layer).
  const std::vector<double>& norms() const { return norms_; }
  // {"embed":0.12,"h.0":0.5,...} in forward order (the reverse of layers()), non-finite as
  // null, for the step log.
  std::string norms_json() const;
  // The dump for a non-finite layer: step, rank, the layer, every tensor's statistics, and all
  // layer norms. One JSON object.
  std::string dump_json(int layer_index, const float* grads, int step, int rank) const;

 private:
  std::vector<GradLayer> layers_;
  std::vector<double> norms_;
};

}  // namespace cann::debug

// Per-layer gradient norms and the non-finite report (see grad_watch.h).
#include "train/grad_watch.h"

#include <cstdlib>
#include <limits>
#include <map>

#include "core/fs.h"
#include "core/json_line.h"
#include "debug/grad_inspector.h"
#include "model/param_table.h"

namespace cann::train {
namespace {

// The table's layers in backward order: the final norm (layer index L), blocks L-1..0, then
// the embeddings (-1, which also hold the tied output head).
std::vector<debug::GradLayer> backward_order_layers(const model::ParamTable& table) {
  std::map<int, debug::GradLayer, std::greater<int>> by_layer;
  int last = 0;
  for (const model::TensorInfo& t : table.tensors()) last = std::max(last, t.layer);
  for (const model::TensorInfo& t : table.tensors()) {
    debug::GradLayer& l = by_layer[t.layer];
    if (l.name.empty())
      l.name = t.layer < 0 ? "embed" : t.layer == last ? "ln_f" : "h." + std::to_string(t.layer);
    l.tensors.push_back({t.name, t.offset, t.numel});
  }
  std::vector<debug::GradLayer> out;
  for (auto& [index, layer] : by_layer) out.push_back(std::move(layer));
  return out;
}

}  // namespace

GradWatch::GradWatch(const model::ParamTable& table, bool halt, std::string dump_dir, int rank)
    : inspector_(std::make_unique<debug::GradInspector>(backward_order_layers(table))),
      halt_(halt),
      dump_dir_(std::move(dump_dir)),
      rank_(rank) {
  const char* spec = std::getenv("CANN_TRAIN_FAULT_GRAD");
  std::string rest = spec != nullptr ? spec : "";
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const size_t colon = item.find(':');
    if (colon == std::string::npos) continue;
    auto index = table.find(item.substr(colon + 1));
    if (index.ok()) faults_.push_back({std::atoi(item.c_str()), table.at(*index).offset});
  }
}

GradWatch::~GradWatch() = default;

bool GradWatch::inspect(float* grads, int step) {
  for (const Fault& f : faults_)
    if (f.step == step) grads[f.offset] = std::numeric_limits<float>::quiet_NaN();
  first_bad_layer_ = inspector_->inspect(grads);
  return first_bad_layer_ >= 0;
}

std::string GradWatch::norms_json() const {
  return inspector_->norms_json();
}

Status GradWatch::on_nonfinite(int step, const float* grads, std::string* event,
                               std::string* message) {
  event->clear();
  message->clear();
  if (reported_ && !halt_) return OkStatus();
  reported_ = true;
  JsonLine e;
  e.add("event", "nonfinite_grad").add("step", step).add("rank", rank_);
  std::string what;
  if (first_bad_layer_ >= 0) {
    const debug::GradLayer& layer = inspector_->layers()[first_bad_layer_];
    e.add("layer", layer.name);
    // The layer's tensors that hold NaN/Inf, for the one-line report.
    std::string tensors;
    for (const debug::GradTensor& t : layer.tensors) {
      const debug::TensorGradStats s = debug::tensor_grad_stats(t, grads);
      if (s.nan + s.inf == 0) continue;
      if (!tensors.empty()) tensors += ", ";
      tensors += s.name + " (" + std::to_string(s.nan) + " NaN, " + std::to_string(s.inf) + " Inf)";
    }
    what = "non-finite gradient at step " + std::to_string(step) + ", first in layer " +
           layer.name + " (backward order) on rank " + std::to_string(rank_) + ": " + tensors;
  } else {
    e.add("layer", "");  // another rank's gradients (zero=1 or 1-bit Adam keep them local)
    what = "non-finite gradient at step " + std::to_string(step) +
           " on another rank (this rank's are finite)";
  }
  *event = e.str();
  if (!halt_) {
    *message = what;
    return OkStatus();
  }
  std::string dump;
  if (first_bad_layer_ >= 0) {
    CANN_RETURN_IF_ERROR(make_dirs(dump_dir_));
    dump = join_path(dump_dir_, "nonfinite-step" + std::to_string(step) + "-rank" +
                                    std::to_string(rank_) + ".json");
    CANN_RETURN_IF_ERROR(
        write_file_atomic(dump, inspector_->dump_json(first_bad_layer_, grads, step, rank_)));
  }
  return FailedPrecondition(what + (dump.empty() ? "" : "; dump: " + dump) +
                            "; hint: lower --lr, raise --warmup or set --grad-clip, and see "
                            "`cann-train debug grads` on the step log");
}

}  // namespace cann::train

// GradWatch: the trainer's side of `--grad-norms` / `--halt-on-nan`. It maps the model's
// ParamTable onto the gradient inspector's layers (debug/grad_inspector.h), checks the
// gradients after every backward, and when one goes non-finite reports the first layer (in
// backward order) and step, once, as a warning line and a step-log event; with --halt-on-nan
// it writes a dump of the offending layer's tensors and returns the error that stops the run.
//
// Which gradients: what the model's gradient buffer holds after backward and reduction, i.e.
// the averaged gradients with plain data parallelism (the same on every rank), and this rank's
// own gradients under zero=1 or 1-bit Adam (which reduce elsewhere). Every rank checks its
// own; the trainer agrees on "any rank non-finite" with the step's scalars, so all ranks stop
// at the same step.
//
// Fault injection for tests (as LevelDB's environment wrapper injects I/O faults): the
// environment variable CANN_TRAIN_FAULT_GRAD="STEP:TENSOR[,STEP:TENSOR...]" sets the first
// gradient element of each named tensor to NaN at that step, just before the check.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::model {
class ParamTable;
}
namespace cann::debug {
class GradInspector;
}

namespace cann::train {

class GradWatch {
 public:
  GradWatch(const model::ParamTable& table, bool halt, std::string dump_dir, int rank);
  ~GradWatch();

  // After backward at `step` (1-based): computes the per-layer norms; true when this rank's
  // gradients hold a non-finite value.
  bool inspect(float* grads, int step);
  // {"embed":..,"h.0":..,...}: the last inspect()'s per-layer norms, for the step log.
  std::string norms_json() const;
  // Once the ranks agreed that some gradient is non-finite at `step`: on the first such step
  // fills `event` with the step-log event line and `message` with the one-line report (empty
  // on later steps). With halt, writes the dump and returns kFailedPrecondition.
  Status on_nonfinite(int step, const float* grads, std::string* event, std::string* message);

 private:
  struct Fault {
    int step = 0;
    size_t offset = 0;
  };
  std::unique_ptr<debug::GradInspector> inspector_;
  std::vector<Fault> faults_;
  bool halt_;
  std::string dump_dir_;
  int rank_;
  int first_bad_layer_ = -1;  // this rank's, from the last inspect()
  bool reported_ = false;
};

}  // namespace cann::train

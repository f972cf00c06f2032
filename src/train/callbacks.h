// What a program that drives the Trainer (a user's own, built against the installed engine)
// can be told by the training loop: every committed step, and every fault it survived (as a
// rank that stayed: the lost peer and the step it resumes after; as a replacement process:
// that it was restored, and from where). The elastic agent tells its own program about the
// faults it handled through AgentConfig::on_fault (elastic/agent.h).
//
// Callbacks run on the training thread between steps; a slow one slows training.
#pragma once

#include <functional>
#include <string>

namespace cann::train {

struct StepEvent {
  int step = 0;  // 1-based, committed
  double loss = 0.0;
  double step_time_s = 0.0;
  int rank = 0;
  int generation = 0;  // elastic generation; 0 without --elastic
};

struct FaultEvent {
  int rank = 0;
  int generation = 0;         // the generation training goes on in
  std::string what_failed;    // as this rank saw it
  int restored_step = 0;      // the committed step training resumes after
  std::string restored_from;  // where that step's state came from
};

struct TrainCallbacks {
  std::function<void(const StepEvent&)> on_step;
  std::function<void(const FaultEvent&)> on_fault;
};

}  // namespace cann::train

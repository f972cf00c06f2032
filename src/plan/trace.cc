// Chrome trace writer for simulated schedules (see trace.h). Built as text: a trace of a
// 64-stage, 512-micro-batch pipeline has about 130,000 events.
#include "plan/trace.h"

#include <cstdio>

#include "core/json_line.h"

namespace cann::plan {
namespace {

const int kCompute = 0, kP2p = 1, kCollectives = 2;

void slice(std::string& out, const std::string& name, const char* cat, int pid, int tid,
           double start_s, double dur_s, const std::string& args = "") {
  if (dur_s <= 0) return;
  char buf[160];
  std::snprintf(buf, sizeof(buf), ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f",
                pid, tid, start_s * 1e6, dur_s * 1e6);
  out += ",\n{\"name\":" + JsonLine::escape(name) + ",\"cat\":\"" + cat + "\"" + buf;
  if (!args.empty()) out += ",\"args\":" + args;
  out += "}";
}

void meta(std::string& out, const char* what, int pid, int tid, const std::string& name) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d", what, pid,
                tid);
  if (!out.empty()) out += ",\n";
  out += buf;
  out += ",\"args\":{\"name\":" + JsonLine::escape(name) + "}}";
}

}  // namespace

std::string chrome_trace(const PlanInput& in, const Prediction& p) {
  std::string ev;
  const int stages = static_cast<int>(p.stages.size());
  for (int i = 0; i < stages; ++i) {
    const StageReport& st = p.stages[i];
    std::string name = "stage " + std::to_string(i) + " (layers";
    for (const auto& [a, b] : st.layers) {
      name += ' ';
      name += std::to_string(a);
      name += '-';
      name += std::to_string(b);
    }
    name += std::string(st.embedding ? ", embedding" : "") + (st.head ? ", head" : "") + ")";
    meta(ev, "process_name", i, 0, name);
    meta(ev, "thread_name", i, kCompute, "compute");
    meta(ev, "thread_name", i, kP2p, "p2p");
    meta(ev, "thread_name", i, kCollectives, "collectives");
  }
  for (const PipelineEvent& e : p.pipeline.events) {
    const StageReport& st = p.stages[e.device];
    const std::string id = "mb " + std::to_string(e.micro_batch) +
                           (p.strategy.vpp > 1 ? " chunk " + std::to_string(e.chunk) : "");
    const double dur = e.end_s - e.start_s;
    const std::string args = "{\"micro_batch\":" + std::to_string(e.micro_batch) +
                             ",\"chunk\":" + std::to_string(e.chunk) + "}";
    switch (e.op) {
      case PipeOp::kForward:
      case PipeOp::kBackward: {
        const bool fwd = e.op == PipeOp::kForward;
        slice(ev, (fwd ? "F " : "B ") + id, fwd ? "forward" : "backward", e.device, kCompute,
              e.start_s, dur, args);
        // The collectives inside this pass: the stage's share for this pass, at its end.
        const double total = fwd ? st.fwd_s : st.bwd_s;
        const double comm = total > 0 ? dur * (fwd ? st.fwd_comm_s : st.bwd_comm_s) / total : 0;
        slice(ev, (fwd ? "tp/ep/cp comm F " : "tp/ep/cp comm B ") + id, "collective", e.device,
              kCollectives, e.end_s - comm, comm);
        break;
      }
      case PipeOp::kSendForward:
        slice(ev, "send activation " + id, "p2p", e.device, kP2p, e.start_s, dur, args);
        break;
      case PipeOp::kSendBackward:
        slice(ev, "send gradient " + id, "p2p", e.device, kP2p, e.start_s, dur, args);
        break;
    }
  }
  for (int i = 0; i < stages; ++i) {
    const StageReport& st = p.stages[i];
    const double end = p.pipeline.device_end_s[i];
    slice(ev, "gradient reduction (exposed)", "collective", i, kCollectives, end, st.dp_comm_s);
    slice(ev, "optimizer step", "optimizer", i, kCompute, end + st.dp_comm_s, st.optimizer_s);
  }
  char other[256];
  std::snprintf(other, sizeof(other),
                "\"otherData\":{\"step_time_s\":%.6f,\"bubble_ratio\":%.4f,\"devices\":%d}",
                p.step_time_s, p.bubble_ratio, in.cluster.num_devices());
  return "{\"displayTimeUnit\":\"ms\"," + std::string(other) + ",\"traceEvents\":[\n" + ev +
         "\n]}\n";
}

}  // namespace cann::plan

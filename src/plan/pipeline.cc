// 1F1B and interleaved 1F1B: Megatron-LM's op order per device, an event simulation over it,
// and the closed-form estimate (see pipeline.h).
#include "plan/pipeline.h"

#include <algorithm>

#include "core/check.h"

namespace cann::plan {
namespace {

struct Op {
  bool forward = true;
  int chunk = 0;
  int micro_batch = 0;
};

// Megatron-LM's order (schedules.py, forward_backward_pipelining_with/without_interleaving).
// Forward number k of device i runs chunk (k mod (p*v)) / p on micro-batch
// (k / (p*v)) * p + k mod p: micro-batches go through chunk 0 in groups of p, then chunk 1...
// Backward number k runs the chunks in reverse. Warm-up forwards: p - i - 1 without
// interleaving; (p - i - 1) * 2 + (v - 1) * p with it.
std::vector<Op> device_order(int p, int v, int m, int i) {
  const int total = m * v;
  auto fwd = [&](int k) {
    const int group = k / (p * v), in_group = k % (p * v);
    return Op{true, v == 1 ? 0 : in_group / p, v == 1 ? k : group * p + in_group % p};
  };
  auto bwd = [&](int k) {
    Op o = fwd(k);
    o.forward = false;
    if (v > 1) o.chunk = v - 1 - o.chunk;
    return o;
  };
  int warmup = v == 1 ? p - i - 1 : (p - i - 1) * 2 + (v - 1) * p;
  warmup = std::min(warmup, total);
  std::vector<Op> ops;
  ops.reserve(2 * total);
  for (int k = 0; k < warmup; ++k) ops.push_back(fwd(k));
  const int steady = total - warmup;
  for (int k = 0; k < steady; ++k) {
    ops.push_back(fwd(warmup + k));
    ops.push_back(bwd(k));
  }
  for (int k = steady; k < total; ++k) ops.push_back(bwd(k));
  return ops;
}

}  // namespace

PipelineResult simulate_pipeline(const PipelineInput& in, bool record_events) {
  const int p = in.pp, v = in.vpp, m = in.micro_batches, stages = p * v;
  CANN_CHECK(static_cast<int>(in.chunks.size()) == p) << "chunks for " << p << " devices";
  CANN_CHECK(v == 1 || m % p == 0) << "interleaving needs micro-batches divisible by pp";
  PipelineResult r;
  r.device_end_s.assign(p, 0);
  r.busy_s.assign(p, 0);
  r.p2p_s.assign(p, 0);
  r.peak_activation_bytes.assign(p, 0);
  // When the output of forward (or backward) of virtual stage vs for micro-batch mb is
  // available to its consumer; -1 until it runs.
  std::vector<double> fwd_ready(static_cast<size_t>(stages) * m, -1);
  std::vector<double> bwd_ready(static_cast<size_t>(stages) * m, -1);
  auto at = [m](int vs, int mb) { return static_cast<size_t>(vs) * m + mb; };

  std::vector<std::vector<Op>> order(p);
  for (int i = 0; i < p; ++i) order[i] = device_order(p, v, m, i);
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0), held(p, 0);
  size_t remaining = 0;
  for (const auto& o : order) remaining += o.size();

  while (remaining > 0) {
    bool progress = false;
    for (int i = 0; i < p; ++i) {
      while (next[i] < order[i].size()) {
        const Op& op = order[i][next[i]];
        const int vs = op.chunk * p + i;
        double ready = 0;
        if (op.forward && vs > 0) {
          ready = fwd_ready[at(vs - 1, op.micro_batch)];
        } else if (!op.forward && vs < stages - 1) {
          ready = bwd_ready[at(vs + 1, op.micro_batch)];
        }
        if (ready < 0) break;  // waits for another device
        const ChunkCost& cc = in.chunks[i][op.chunk];
        const double start = std::max(free_at[i], ready);
        const double end = start + (op.forward ? cc.fwd_s : cc.bwd_s);
        r.busy_s[i] += end - start;
        if (record_events)
          r.events.push_back({i, op.chunk, op.micro_batch,
                              op.forward ? PipeOp::kForward : PipeOp::kBackward, start, end});
        double done = end;
        // The result leaves for another device: a blocking send.
        const bool sends = op.forward ? vs < stages - 1 : vs > 0;
        if (sends && p > 1 && in.p2p_s > 0) {
          done = end + in.p2p_s;
          r.p2p_s[i] += in.p2p_s;
          if (record_events)
            r.events.push_back({i, op.chunk, op.micro_batch,
                                op.forward ? PipeOp::kSendForward : PipeOp::kSendBackward, end,
                                done});
        }
        if (op.forward) {
          fwd_ready[at(vs, op.micro_batch)] = done;
          held[i] += cc.activation_bytes;
          r.peak_activation_bytes[i] = std::max(r.peak_activation_bytes[i], held[i]);
        } else {
          bwd_ready[at(vs, op.micro_batch)] = done;
          held[i] -= cc.activation_bytes;
        }
        free_at[i] = done;
        r.device_end_s[i] = done;
        ++next[i];
        --remaining;
        progress = true;
      }
    }
    CANN_CHECK(progress) << "pipeline schedule deadlocked (pp=" << p << ", vpp=" << v << ", m=" << m
                         << ")";
  }
  r.makespan_s = *std::max_element(r.device_end_s.begin(), r.device_end_s.end());
  double used = 0;
  for (int i = 0; i < p; ++i) used += r.busy_s[i] + r.p2p_s[i];
  r.bubble_ratio = r.makespan_s > 0 ? 1 - used / (p * r.makespan_s) : 0;
  return r;
}

PipelineResult estimate_pipeline(const PipelineInput& in) {
  const int p = in.pp, v = in.vpp, m = in.micro_batches, stages = p * v;
  PipelineResult r;
  r.device_end_s.assign(p, 0);
  r.busy_s.assign(p, 0);
  r.p2p_s.assign(p, 0);
  r.peak_activation_bytes.assign(p, 0);
  double max_s = 0, sum_s = 0;
  for (int i = 0; i < p; ++i) {
    double per_mb = 0, sends = 0, act = 0;
    for (int c = 0; c < v; ++c) {
      const ChunkCost& cc = in.chunks[i][c];
      per_mb += cc.fwd_s + cc.bwd_s;
      act += cc.activation_bytes;
      const int vs = c * p + i;
      if (p > 1) sends += (vs < stages - 1) + (vs > 0);
    }
    r.busy_s[i] = m * per_mb;
    r.p2p_s[i] = m * sends * in.p2p_s;
    const double s_i = per_mb + sends * in.p2p_s;
    max_s = std::max(max_s, s_i);
    sum_s += s_i;
    // In flight at the first backward: the warm-up forwards plus one (see device_order).
    const double chunks_in_flight =
        v == 1 ? std::min(m, p - i) : std::min(m * v, (p - i - 1) * 2 + (v - 1) * p + 1);
    r.peak_activation_bytes[i] = chunks_in_flight * act / v;
  }
  r.makespan_s = (m - 1) * max_s + max_s + (sum_s - max_s) / v;
  if (v == 1 && p > 1) {
    // Without interleaving, take the critical path through each stage as if it were the
    // bottleneck: the first micro-batch reaches stage i after the forwards before it (A_i);
    // stage i runs k_i = min(p - i, m) forwards before its first backward, which cannot start
    // before the first micro-batch has gone down the rest of the pipeline and back (R_i); then
    // it does the rest of its m forwards and backwards, and its last gradient drains through
    // the stages before it (C_i). Sends count on the sender.
    //   T_i = A_i + max(k_i F_i, F_i + R_i) + m B_i + (m - k_i) F_i + C_i,  T = max_i T_i
    // With equal stages this is (m + p - 1)(F + B); with one heavy stage it finds the stall
    // that the heavy stage's warm-up cannot hide (the tests compare it with the simulation).
    std::vector<double> F(p), B(p);
    for (int i = 0; i < p; ++i) {
      F[i] = in.chunks[i][0].fwd_s + (i < p - 1 ? in.p2p_s : 0);
      B[i] = in.chunks[i][0].bwd_s + (i > 0 ? in.p2p_s : 0);
    }
    std::vector<double> R(p + 1, 0);
    for (int i = p - 1; i >= 0; --i) R[i] = R[i + 1] + (i + 1 < p ? F[i + 1] + B[i + 1] : 0);
    double A = 0, C = 0, worst = 0;
    for (int i = 0; i < p; ++i) {
      const double k = std::min(p - i, m);
      worst = std::max(worst, A + std::max(k * F[i], F[i] + R[i]) + m * B[i] + (m - k) * F[i] + C);
      A += F[i];
      C += B[i];
    }
    r.makespan_s = worst;
  }
  r.device_end_s.assign(p, r.makespan_s);
  double used = 0;
  for (int i = 0; i < p; ++i) used += r.busy_s[i] + r.p2p_s[i];
  r.bubble_ratio = r.makespan_s > 0 ? std::max(0.0, 1 - used / (p * r.makespan_s)) : 0;
  return r;
}

}  // namespace cann::plan

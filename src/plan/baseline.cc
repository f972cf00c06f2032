// Baseline layouts and speed-ups against them (see baseline.h).
#include "plan/baseline.h"

#include <cstdio>

namespace cann::plan {

StatusOr<Prediction> default_baseline(const PlanInput& in, int gbs) {
  const int n = in.cluster.num_devices();
  if (gbs % n != 0)
    return NotFound("no baseline: pure data parallelism over " + std::to_string(n) +
                    " devices needs a global batch that is a multiple of " + std::to_string(n) +
                    ", not " + std::to_string(gbs));
  for (int zero = 0; zero <= 3; ++zero) {
    if (n == 1 && zero > 0) break;
    StatusOr<Prediction> best = NotFound("");
    for (int mbs = 1; mbs <= gbs / n; ++mbs) {
      if ((gbs / n) % mbs != 0) continue;
      for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
        Strategy s;
        s.dp = n;
        s.mbs = mbs;
        s.gbs = gbs;
        s.zero = zero;
        s.recompute = rc;
        auto p = predict(in, s, Fidelity::kExact);
        if (!p.ok() || !p->fits) continue;
        if (!best.ok() || p->step_time_s < best->step_time_s) best = std::move(p);
      }
    }
    if (best.ok()) return best;
  }
  return NotFound("no baseline: pure data parallelism over " + std::to_string(n) +
                  " devices fits the memory limit at no ZeRO stage");
}

StatusOr<Prediction> baseline_of(const PlanInput& in, const std::string& text, int gbs) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("--baseline '" + text + "': " + why +
                           (why.find("hint:") == std::string::npos
                                ? "; hint: give a strategy as simulate --strategy takes it, e.g. "
                                  "zero=1 or tp=8,pp=4"
                                : ""));
  };
  auto parsed = parse_strategy(text);
  if (!parsed.ok()) return bad(parsed.status().message());
  if (parsed->gbs != 0 && parsed->gbs != gbs)
    return bad("gbs=" + std::to_string(parsed->gbs) + " differs from the search's global batch " +
               std::to_string(gbs) +
               "; hint: leave gbs out, so the speed-up compares step times at one batch");
  auto s = resolve_strategy(*parsed, in.model, in.cluster, gbs);
  if (!s.ok()) return bad(s.status().message());
  auto p = predict(in, *s, Fidelity::kExact);
  if (!p.ok()) return bad(p.status().message());
  if (!p->fits) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "needs %.1f GB per device, over the %.1f GB limit; hint: give a baseline "
                  "that fits (more ZeRO, recomputation or model parallelism)",
                  p->memory_peak_bytes / 1073741824.0, in.memory_limit_bytes / 1073741824.0);
    return bad(buf);
  }
  return p;
}

double estimated_speedup(const Prediction& baseline, const Prediction& candidate) {
  return candidate.step_time_s > 0 ? baseline.step_time_s / candidate.step_time_s : 0;
}

}  // namespace cann::plan

// Error bands by layout kind (see error_band.h).
#include "plan/error_band.h"

namespace cann::plan {
namespace {

// validation_bench's "error bands" lines: 10th and 90th percentile of the signed errors of the
// out-of-sample validation rows of each kind, and how many rows there are.
constexpr ErrorBand kBands[] = {
    {-0.444, -0.102, 17},  // dp
    {-0.142, 0.049, 16},   // tp
    {-0.135, -0.044, 16},  // pipeline
    {-0.264, -0.032, 4},   // moe: fewer than kMinBandRows rows, all rows' band
};

}  // namespace

std::string_view layout_kind_name(LayoutKind k) {
  switch (k) {
    case LayoutKind::kDp:
      return "dp";
    case LayoutKind::kTp:
      return "tp";
    case LayoutKind::kPipeline:
      return "pipeline";
    case LayoutKind::kMoe:
      return "moe";
  }
  return "dp";
}

LayoutKind layout_kind(const Strategy& s, const model::ModelSpec& m) {
  if (m.is_moe()) return LayoutKind::kMoe;
  if (s.pp > 1) return LayoutKind::kPipeline;
  if (s.tp > 1 || s.cp > 1) return LayoutKind::kTp;
  return LayoutKind::kDp;
}

ErrorBand error_band(LayoutKind k) {
  return kBands[static_cast<int>(k)];
}

StepBand step_band(double step_s, const ErrorBand& b) {
  return {step_s / (1 + b.p90), step_s / (1 + b.p10)};
}

}  // namespace cann::plan

// Anomaly detectors for the scalar series every training step produces: loss, gradient norm
// and step time. Two detectors with different strengths, and a monitor that runs both:
//
//  - RollingZScore: a robust z-score of each value against the last W values (median and MAD,
//    as in the modified z-score of Iglewicz & Hoaglin 1993). It catches spikes: one step far
//    from its neighbours. The spike is scored before it enters the window, and the median and
//    MAD stay bounded until half the window is outliers (breakdown point 50%), so a burst of
//    spikes does not hide itself as a mean and standard deviation would let it.
//    A sustained shift smaller than the threshold is invisible to it by construction.
//  - EwmaDetector: an EWMA control chart (Roberts 1959) against a slowly adapting baseline. It
//    catches level shifts and drifts: a 3-sigma step up in step time almost never alarms the
//    z-score (4% of such shifts), but the smoothed level crosses its limit within ~5 steps.
//    It is deliberately slow to react to one spike (its input is clipped), so prefer it for
//    "the job got slower and stayed slower" and the z-score for "this step was wrong".
//  - SeriesMonitor: both detectors on the three series, one sensitivity knob per series.
//
// Alarms are plain structs with a message ready to print; nothing here does I/O or keeps time.
// Thread safety: none; each detector belongs to the thread that feeds it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cann::monitor {

// Which deviations count. A falling loss or a shorter step is good news, so the monitor
// watches all three series with kUp.
enum class Direction { kUp, kDown, kBoth };

struct Alarm {
  std::string series;    // "loss", "grad_norm", "step_time", or a caller's name
  std::string detector;  // "zscore", "ewma" or "nonfinite"
  int64_t step = 0;
  double value = 0.0;     // the observation at this step
  double level = 0.0;     // what was tested: the observation (zscore), the smoothed level (ewma)
  double baseline = 0.0;  // window median (zscore), baseline mean (ewma)
  double scale = 0.0;     // the sigma the score divides by
  double score = 0.0;     // (level - baseline) / scale, signed; +inf for a non-finite value
  std::string message;    // "loss spike at step 812: 3.41 vs median 2.27 (robust z 9.1)"
};

// The sensitivity knob (0..1, 0.5 the default) as a factor on every threshold:
// 2^(1 - 2 s), so 0 -> 2x, 0.25 -> 1.41x, 0.5 -> 1x, 0.75 -> 0.71x, 1 -> 0.5x. A geometric
// scale because false-alarm rates fall off exponentially in the threshold: each quarter step
// of the knob changes the threshold by the same ratio. Values outside 0..1 are clamped.
double sensitivity_factor(double sensitivity);

// Robust rolling z-score: z = (x - median) / (1.4826 * MAD) over the previous `window` values.
// 1.4826 = 1 / Phi^-1(3/4) makes the scaled MAD estimate sigma for Gaussian noise. The value
// under test is scored against the window before it is added, so a spike never inflates its
// own baseline. Cost: O(window) per value (two nth_element passes).
class RollingZScore {
 public:
  struct Options {
    size_t window = 100;
    // No alarm until this many values are in the window: with 30 points the MAD's standard
    // error is about 0.21 sigma, small enough that the 6-sigma threshold keeps its margin.
    size_t min_points = 30;
    // |z| above this alarms. For Gaussian noise z > 6 has probability 3.3e-7 per value with
    // the window full: not the 1e-9 of a known sigma, because the MAD of 100 points scatters
    // by ~12% and fattens the tail like a Student t with ~37 degrees of freedom. Summed over
    // 10,000 values (with the ramp from 30 points) that is 0.0037 expected one-sided false
    // alarms, 0.0074 two-sided. An 8-sigma spike is missed with probability 0.3%, a 10-sigma
    // one below 1e-5; 6.5 would cost 2.5% of 8-sigma spikes for 4x fewer false alarms.
    // (Computed by Monte Carlo over the exact conditional tail; see detectors_test.cc.)
    double threshold = 6.0;
    Direction direction = Direction::kBoth;
    // Floor on the scale, relative to |median|: a series that has been exactly constant would
    // otherwise alarm on any change at all (MAD 0). A change of 0.1% x threshold still alarms.
    double min_relative_scale = 1e-3;
  };

  explicit RollingZScore(std::string series, Options options);
  explicit RollingZScore(std::string series) : RollingZScore(std::move(series), Options{}) {}

  // Scores `value` against the window, then adds it. A non-finite value always alarms
  // (detector "nonfinite") and is not added.
  std::optional<Alarm> observe(int64_t step, double value);

  size_t size() const { return count_; }
  void reset();

 private:
  std::string series_;
  Options options_;
  std::vector<double> ring_;     // the last `window` values, oldest at next_ once full
  size_t next_ = 0;              // where the next value goes
  size_t count_ = 0;             // values in the ring
  std::vector<double> scratch_;  // reused by the median and MAD selections
};

// EWMA control chart with an adaptive baseline. Per value x:
//   level    <- (1 - alpha) level + alpha x'           the smoothed level under test
//   baseline <- exponentially weighted mean and variance of x'' with rate baseline_alpha
//   alarm when (level - baseline_mean) / sd > threshold
// x' and x'' are x clipped to baseline_mean +- clip sigma (after warmup), so a single huge
// spike moves the level by at most alpha * clip sigma. sd is the exact standard deviation of
// (level - baseline_mean) for i.i.d. noise of the baseline's variance: both are weighted sums
// of past values, so var = sigma^2 * sum_i (w_level,i - w_base,i)^2, tracked recursively.
// For alpha 0.1 and baseline_alpha 0.01 that is 0.198 sigma: a shift of d sigma moves the
// level away from the baseline by up to 0.71 d sigma (after ~24 steps, when the baseline
// starts to follow), so d = 2 peaks near 7 sd and d = 1.5 near 5.3 sd.
//
// During the first values both rates are raised to 1/n (a plain running mean and variance),
// so the baseline starts unbiased; no alarm before `warmup` values. After an alarm the
// detector restarts from the current value: a shift is reported once and the new level is
// learned over the next `warmup` values, rather than alarming on every step until the slow
// baseline catches up (and with an inflated variance afterwards).
class EwmaDetector {
 public:
  struct Options {
    double alpha = 0.1;            // weight of the newest value in the level (~10 steps)
    double baseline_alpha = 0.01;  // baseline memory (~100 steps, the z-score's window)
    // The baseline variance is a full-efficiency estimate over ~100 values (the MAD uses 37%
    // of them) and the tested level is an average of ~10 values, close to Gaussian, so 5 here
    // gives fewer false alarms than 6 for the z-score: at 5, Gaussian noise alarms
    // with probability 3e-8 per value one-sided (1.3e-7 two-sided), 3e-4 expected alarms in
    // 10,000 values. Shifts up of 2 sigma are caught in a median 9 steps, 3 sigma in 5,
    // 1.5 sigma 89% of the time; at 6 a 2-sigma shift would be missed 19% of the time.
    double threshold = 5.0;
    size_t warmup = 50;
    double clip = 4.0;  // in baseline sigmas
    Direction direction = Direction::kBoth;
    double min_relative_scale = 1e-3;  // as in RollingZScore
  };

  explicit EwmaDetector(std::string series, Options options);
  explicit EwmaDetector(std::string series) : EwmaDetector(std::move(series), Options{}) {}

  std::optional<Alarm> observe(int64_t step, double value);

  size_t size() const { return count_; }
  double level() const { return level_; }
  double baseline_mean() const { return mean_; }
  double baseline_sigma() const;
  void reset();

 private:
  std::string series_;
  Options options_;
  size_t count_ = 0;
  double level_ = 0.0;
  double mean_ = 0.0;
  double var_ = 0.0;
  // Sums over past values of w_level^2, w_base^2 and w_level * w_base.
  double level_weight_sq_ = 0.0;
  double base_weight_sq_ = 0.0;
  double cross_weight_ = 0.0;
};

enum class Series { kLoss, kGradNorm, kStepTime };
const char* series_name(Series series);

// Both detectors on loss, gradient norm and step time, each watching increases only. A
// non-finite value is reported once (detector "nonfinite") and kept out of both detectors.
class SeriesMonitor {
 public:
  struct Options {
    // 0..1, 0.5 the default; scales both detectors' thresholds (see sensitivity_factor).
    double loss_sensitivity = 0.5;
    double grad_norm_sensitivity = 0.5;
    double step_time_sensitivity = 0.5;
    RollingZScore::Options zscore;  // thresholds here are the ones at sensitivity 0.5
    EwmaDetector::Options ewma;
  };

  explicit SeriesMonitor(Options options);
  SeriesMonitor() : SeriesMonitor(Options{}) {}

  // One value of one series. Returns zero, one or two alarms (a value can be both a spike and
  // the step that completes a shift).
  std::vector<Alarm> observe(Series series, int64_t step, double value);
  // One training step's three values.
  std::vector<Alarm> observe_step(int64_t step, double loss, double grad_norm, double step_time_s);

 private:
  struct Detectors {
    RollingZScore zscore;
    EwmaDetector ewma;
  };
  static Detectors make(Series series, double sensitivity, const Options& options);

  std::vector<Detectors> detectors_;  // indexed by Series
};

}  // namespace cann::monitor

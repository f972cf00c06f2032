// The series detectors: robust rolling z-score, EWMA chart, and the monitor that runs both on
// loss, gradient norm and step time. See detectors.h for the statistics and the thresholds.
#include "monitor/detectors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "core/check.h"

namespace cann::monitor {
namespace {

// 1 / Phi^-1(3/4): scales the MAD to sigma for Gaussian data.
constexpr double kMadToSigma = 1.4826;
// sqrt(pi / 2): scales the mean absolute deviation to sigma for Gaussian data, used when more
// than half the window equals the median (MAD 0) but the rest does not.
constexpr double kMeanAdToSigma = 1.2533;

std::string format_number(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", x);
  return text;
}

bool exceeds(double score, double threshold, Direction direction) {
  switch (direction) {
    case Direction::kUp:
      return score > threshold;
    case Direction::kDown:
      return score < -threshold;
    case Direction::kBoth:
      return std::abs(score) > threshold;
  }
  return false;
}

Alarm nonfinite_alarm(const std::string& series, int64_t step, double value) {
  Alarm alarm;
  alarm.series = series;
  alarm.detector = "nonfinite";
  alarm.step = step;
  alarm.value = value;
  alarm.level = value;
  alarm.score = std::numeric_limits<double>::infinity();
  alarm.message = series + " is " +
                  (std::isnan(value) ? "nan"
                   : value > 0       ? "+inf"
                                     : "-inf") +
                  " at step " + std::to_string(step);
  return alarm;
}

// Median of v (reordered in place); v is not empty.
double median_of(std::vector<double>& v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  // Even count: the lower middle is the largest of the first half.
  const double lower = *std::max_element(v.begin(), v.begin() + mid);
  return 0.5 * (lower + upper);
}

double scale_floor(double center, double min_relative_scale) {
  return std::max(min_relative_scale * std::abs(center), std::numeric_limits<double>::min());
}

}  // namespace

double sensitivity_factor(double sensitivity) {
  const double s = std::clamp(std::isnan(sensitivity) ? 0.5 : sensitivity, 0.0, 1.0);
  return std::exp2(1.0 - 2.0 * s);
}

// ---- RollingZScore ----

RollingZScore::RollingZScore(std::string series, Options options)
    : series_(std::move(series)), options_(options) {
  CANN_CHECK(options_.window >= 2) << "window " << options_.window;
  options_.min_points = std::clamp<size_t>(options_.min_points, 2, options_.window);
  ring_.resize(options_.window);
  scratch_.reserve(options_.window);
}

void RollingZScore::reset() {
  next_ = 0;
  count_ = 0;
}

std::optional<Alarm> RollingZScore::observe(int64_t step, double value) {
  if (!std::isfinite(value)) return nonfinite_alarm(series_, step, value);

  std::optional<Alarm> alarm;
  if (count_ >= options_.min_points) {
    scratch_.assign(ring_.begin(), ring_.begin() + count_);
    const double median = median_of(scratch_);
    double abs_dev_sum = 0.0;
    for (double& x : scratch_) {
      x = std::abs(x - median);
      abs_dev_sum += x;
    }
    double scale = kMadToSigma * median_of(scratch_);
    if (scale == 0.0) scale = kMeanAdToSigma * abs_dev_sum / static_cast<double>(count_);
    scale = std::max(scale, scale_floor(median, options_.min_relative_scale));
    const double score = (value - median) / scale;
    if (exceeds(score, options_.threshold, options_.direction)) {
      Alarm a;
      a.series = series_;
      a.detector = "zscore";
      a.step = step;
      a.value = value;
      a.level = value;
      a.baseline = median;
      a.scale = scale;
      a.score = score;
      a.message = series_ + (score > 0 ? " spike" : " dip") + " at step " + std::to_string(step) +
                  ": " + format_number(value) + " vs median " + format_number(median) +
                  " (robust z " + format_number(score) + ")";
      alarm = std::move(a);
    }
  }

  ring_[next_] = value;
  next_ = (next_ + 1) % ring_.size();
  count_ = std::min(count_ + 1, ring_.size());
  return alarm;
}

// ---- EwmaDetector ----

EwmaDetector::EwmaDetector(std::string series, Options options)
    : series_(std::move(series)), options_(options) {
  CANN_CHECK(options_.alpha > 0.0 && options_.alpha <= 1.0) << "alpha " << options_.alpha;
  CANN_CHECK(options_.baseline_alpha > 0.0 && options_.baseline_alpha <= 1.0)
      << "baseline_alpha " << options_.baseline_alpha;
  options_.warmup = std::max<size_t>(options_.warmup, 2);
}

void EwmaDetector::reset() {
  count_ = 0;
  level_ = mean_ = var_ = 0.0;
  level_weight_sq_ = base_weight_sq_ = cross_weight_ = 0.0;
}

double EwmaDetector::baseline_sigma() const {
  return std::sqrt(var_);
}

std::optional<Alarm> EwmaDetector::observe(int64_t step, double value) {
  if (!std::isfinite(value)) return nonfinite_alarm(series_, step, value);

  ++count_;
  if (count_ == 1) {
    level_ = mean_ = value;
    var_ = 0.0;
    level_weight_sq_ = base_weight_sq_ = cross_weight_ = 1.0;
    return std::nullopt;
  }
  // Rates of at least 1/n: the first values get equal weights (an unbiased running mean and
  // variance) instead of over-weighting the first value.
  const double n = static_cast<double>(count_);
  const double a = std::max(options_.alpha, 1.0 / n);
  const double b = std::max(options_.baseline_alpha, 1.0 / n);
  const bool armed = count_ > options_.warmup;

  // The floor keeps a so-far constant series able to move its level (and alarm) at all.
  const double sigma = std::max(std::sqrt(var_), scale_floor(mean_, options_.min_relative_scale));
  const double clipped =
      armed ? std::clamp(value, mean_ - options_.clip * sigma, mean_ + options_.clip * sigma)
            : value;
  const double level = (1.0 - a) * level_ + a * clipped;
  // Variance of (level - mean_) over sigma^2: the level puts weight a on this value and
  // (1 - a) w_level on each past one; the baseline mean has not seen this value yet.
  const double weight_var = a * a + (1.0 - a) * (1.0 - a) * level_weight_sq_ + base_weight_sq_ -
                            2.0 * (1.0 - a) * cross_weight_;
  const double sd = sigma * std::sqrt(std::max(weight_var, 0.0));
  const double score = (level - mean_) / sd;

  if (armed && exceeds(score, options_.threshold, options_.direction)) {
    Alarm alarm;
    alarm.series = series_;
    alarm.detector = "ewma";
    alarm.step = step;
    alarm.value = value;
    alarm.level = level;
    alarm.baseline = mean_;
    alarm.scale = sd;
    alarm.score = score;
    alarm.message = series_ + (score > 0 ? " level shift up" : " level shift down") + " at step " +
                    std::to_string(step) + ": smoothed " + format_number(level) + " vs baseline " +
                    format_number(mean_) + " (" + format_number(score) + " sigma)";
    // Relearn from here: the new level is the new normal unless it moves again.
    reset();
    (void)observe(step, value);
    return alarm;
  }

  const double d = clipped - mean_;
  mean_ += b * d;
  var_ = (1.0 - b) * (var_ + b * d * d);
  level_ = level;
  level_weight_sq_ = (1.0 - a) * (1.0 - a) * level_weight_sq_ + a * a;
  base_weight_sq_ = (1.0 - b) * (1.0 - b) * base_weight_sq_ + b * b;
  cross_weight_ = (1.0 - a) * (1.0 - b) * cross_weight_ + a * b;
  return std::nullopt;
}

// ---- SeriesMonitor ----

const char* series_name(Series series) {
  switch (series) {
    case Series::kLoss:
      return "loss";
    case Series::kGradNorm:
      return "grad_norm";
    case Series::kStepTime:
      return "step_time";
  }
  return "unknown";
}

SeriesMonitor::Detectors SeriesMonitor::make(Series series, double sensitivity,
                                             const Options& options) {
  const double factor = sensitivity_factor(sensitivity);
  RollingZScore::Options zscore = options.zscore;
  zscore.threshold *= factor;
  zscore.direction = Direction::kUp;
  EwmaDetector::Options ewma = options.ewma;
  ewma.threshold *= factor;
  ewma.direction = Direction::kUp;
  return Detectors{RollingZScore(series_name(series), zscore),
                   EwmaDetector(series_name(series), ewma)};
}

SeriesMonitor::SeriesMonitor(Options options) {
  detectors_.push_back(make(Series::kLoss, options.loss_sensitivity, options));
  detectors_.push_back(make(Series::kGradNorm, options.grad_norm_sensitivity, options));
  detectors_.push_back(make(Series::kStepTime, options.step_time_sensitivity, options));
}

std::vector<Alarm> SeriesMonitor::observe(Series series, int64_t step, double value) {
  std::vector<Alarm> alarms;
  if (!std::isfinite(value)) {
    alarms.push_back(nonfinite_alarm(series_name(series), step, value));
    return alarms;
  }
  Detectors& d = detectors_[static_cast<size_t>(series)];
  if (auto alarm = d.zscore.observe(step, value)) alarms.push_back(std::move(*alarm));
  if (auto alarm = d.ewma.observe(step, value)) alarms.push_back(std::move(*alarm));
  return alarms;
}

std::vector<Alarm> SeriesMonitor::observe_step(int64_t step, double loss, double grad_norm,
                                               double step_time_s) {
  std::vector<Alarm> alarms = observe(Series::kLoss, step, loss);
  for (auto& a : observe(Series::kGradNorm, step, grad_norm)) alarms.push_back(std::move(a));
  for (auto& a : observe(Series::kStepTime, step, step_time_s)) alarms.push_back(std::move(a));
  return alarms;
}

}  // namespace cann::monitor

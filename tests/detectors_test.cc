// Anomaly detectors on synthetic series from a seeded generator: injected spikes are caught at
// their index, level shifts and drifts by the EWMA chart, and clean noise raises nothing. The
// straggler and slow-link detectors are stragglers_test.cc's.
//
// False alarms. Each "no alarm over 10,000 clean points" test is a fixed draw, so it either
// passes forever or not at all; what matters is how unlikely a failure would have been for an
// arbitrary seed. For the z-score at threshold 6, P(z > 6) per value is 3.3e-7 with a full
// window of 100 (the exact Gaussian tail 1e-9, fattened because the MAD of 100 points scatters
// by ~12%); with the ramp from 30 points, a 10,000-point series expects 0.0037 one-sided
// alarms, 0.0074 two-sided (ZScoreTailProbability recomputes the full-window figure). The
// EWMA chart at 5 sigma expects 1.3e-3 two-sided alarms in 10,000 points. So each clean
// series below would alarm for fewer than 1 seed in 130, and the monitor's three one-sided
// series for about 1 in 80; the tests print the largest score seen so the margin is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/rng.h"
#include "monitor/detectors.h"

namespace cann::monitor {
namespace {

std::vector<double> gaussian(Rng& rng, int n, double mean, double sigma) {
  std::vector<double> v(n);
  for (double& x : v) x = mean + sigma * rng.normal();
  return v;
}

// ---- sensitivity ----

TEST(Sensitivity, ScalesThresholdsGeometrically) {
  EXPECT_DOUBLE_EQ(sensitivity_factor(0.5), 1.0);
  EXPECT_DOUBLE_EQ(sensitivity_factor(0.0), 2.0);
  EXPECT_DOUBLE_EQ(sensitivity_factor(1.0), 0.5);
  EXPECT_NEAR(sensitivity_factor(0.25), std::sqrt(2.0), 1e-12);
  EXPECT_DOUBLE_EQ(sensitivity_factor(-3.0), 2.0);  // clamped
  EXPECT_DOUBLE_EQ(sensitivity_factor(7.0), 0.5);
}

// ---- RollingZScore ----

TEST(RollingZScore, CatchesSpikeAtItsIndex) {
  Rng rng(1);
  std::vector<double> v = gaussian(rng, 1000, 2.0, 0.05);
  v[600] = 2.0 + 8 * 0.05;
  RollingZScore z("loss");
  std::vector<Alarm> alarms;
  for (int i = 0; i < 1000; ++i) {
    if (auto a = z.observe(i, v[i])) alarms.push_back(*a);
  }
  ASSERT_EQ(alarms.size(), 1u);
  EXPECT_EQ(alarms[0].step, 600);
  EXPECT_EQ(alarms[0].detector, "zscore");
  EXPECT_DOUBLE_EQ(alarms[0].value, v[600]);
  EXPECT_NEAR(alarms[0].baseline, 2.0, 0.02);
  // The MAD of 100 points scatters by ~12% of sigma; this window's happens to be 2 SE low.
  EXPECT_GT(alarms[0].scale, 0.03);
  EXPECT_LT(alarms[0].scale, 0.07);
  EXPECT_GT(alarms[0].score, 6.0);
  EXPECT_LT(alarms[0].score, 11.0);
  EXPECT_EQ(alarms[0].message.rfind("loss spike at step 600: 2.4 vs median 2", 0), 0u)
      << alarms[0].message;
}

TEST(RollingZScore, NoAlarmOnTenThousandCleanPoints) {
  for (uint64_t seed : {2, 3, 4}) {
    Rng rng(seed);
    RollingZScore z("x");
    double max_abs = 0.0;
    int alarms = 0;
    RollingZScore::Options probe_options;
    probe_options.threshold = 0.0;  // alarms on everything: reads each score
    RollingZScore probe("x", probe_options);
    for (int i = 0; i < 10000; ++i) {
      const double x = 5.0 + 0.3 * rng.normal();
      if (z.observe(i, x)) ++alarms;
      if (auto a = probe.observe(i, x)) max_abs = std::max(max_abs, std::abs(a->score));
    }
    EXPECT_EQ(alarms, 0) << "seed " << seed;
    std::printf("zscore seed %llu: largest |z| over 10,000 clean points %.2f (threshold 6)\n",
                static_cast<unsigned long long>(seed), max_abs);
  }
}

// The false-alarm rate quoted in detectors.h, recomputed: for windows of 100 Gaussian values,
// average the exact conditional tail P(x > median + 6 * scale | window). Averaging the
// conditional probability instead of counting rare events needs only thousands of windows.
TEST(RollingZScore, ZScoreTailProbability) {
  Rng rng(5);
  const int windows = 20000;
  double tail = 0.0;
  for (int w = 0; w < windows; ++w) {
    RollingZScore::Options options;
    options.threshold = 0.0;
    options.direction = Direction::kUp;
    options.min_points = 100;  // score only the probe below
    RollingZScore z("x", options);
    for (int i = 0; i < 100; ++i) (void)z.observe(i, rng.normal());
    // Recover median and scale by probing with a value far above: the alarm reports both.
    const auto a = z.observe(100, 1e6);
    ASSERT_TRUE(a.has_value());
    tail += 0.5 * std::erfc((a->baseline + 6.0 * a->scale) / std::sqrt(2.0));
  }
  const double per_value = tail / windows;
  std::printf("P(z > 6) per value, full window: %.3g; over 10,000 values: %.3g\n", per_value,
              per_value * 1e4);
  EXPECT_GT(per_value, 1e-7);  // well above the known-sigma 1e-9: the MAD's scatter counts
  EXPECT_LT(per_value, 1e-6);
}

TEST(RollingZScore, BurstOfSpikesDoesNotHideItself) {
  Rng rng(6);
  std::vector<double> v = gaussian(rng, 600, 10.0, 1.0);
  for (int i = 300; i < 340; i += 4) v[i] = 10.0 + 9.0;  // 10 spikes in 40 steps
  RollingZScore z("grad_norm");
  std::vector<int64_t> steps;
  for (int i = 0; i < 600; ++i) {
    if (auto a = z.observe(i, v[i])) steps.push_back(a->step);
  }
  const std::vector<int64_t> want = {300, 304, 308, 312, 316, 320, 324, 328, 332, 336};
  EXPECT_EQ(steps, want);
}

TEST(RollingZScore, DirectionFiltersDips) {
  Rng rng(7);
  std::vector<double> v = gaussian(rng, 300, 1.0, 0.01);
  v[200] = 1.0 - 0.1;
  RollingZScore::Options up;
  up.direction = Direction::kUp;
  RollingZScore::Options down;
  down.direction = Direction::kDown;
  RollingZScore z_up("x", up), z_down("x", down), z_both("x");
  int n_up = 0, n_down = 0, n_both = 0;
  for (int i = 0; i < 300; ++i) {
    n_up += z_up.observe(i, v[i]).has_value();
    n_both += z_both.observe(i, v[i]).has_value();
    if (auto a = z_down.observe(i, v[i])) {
      ++n_down;
      EXPECT_EQ(a->step, 200);
      EXPECT_LT(a->score, -6.0);
      EXPECT_NE(a->message.find("dip"), std::string::npos);
    }
  }
  EXPECT_EQ(n_up, 0);
  EXPECT_EQ(n_down, 1);
  EXPECT_EQ(n_both, 1);
}

TEST(RollingZScore, NeedsMinimumPoints) {
  RollingZScore z("x");
  for (int i = 0; i < 29; ++i) EXPECT_FALSE(z.observe(i, 1.0 + 0.01 * (i % 3)).has_value());
  EXPECT_FALSE(z.observe(29, 1000.0).has_value());  // the 30th value: 29 before it
  EXPECT_TRUE(z.observe(30, 1000.0).has_value());
}

TEST(RollingZScore, ConstantSeriesAlarmsOnARealChangeOnly) {
  RollingZScore z("step_time");
  for (int i = 0; i < 200; ++i) ASSERT_FALSE(z.observe(i, 0.25).has_value());
  // MAD and mean deviation are 0: the floor 1e-3 * 0.25 sets the scale.
  EXPECT_FALSE(z.observe(200, 0.2501).has_value());  // z = 0.4
  const auto a = z.observe(201, 0.26);               // z = 40
  ASSERT_TRUE(a.has_value());
  EXPECT_NEAR(a->score, 40.0, 1e-6);
}

TEST(RollingZScore, NonFiniteAlwaysAlarmsAndStaysOut) {
  RollingZScore z("loss");
  const auto a = z.observe(3, std::nan(""));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->detector, "nonfinite");
  EXPECT_EQ(a->message, "loss is nan at step 3");
  EXPECT_EQ(z.size(), 0u);
  EXPECT_EQ(z.observe(4, -INFINITY)->message, "loss is -inf at step 4");
}

// ---- EwmaDetector ----

TEST(EwmaDetector, NoAlarmOnTenThousandCleanPoints) {
  for (uint64_t seed : {8, 9, 10}) {
    Rng rng(seed);
    EwmaDetector e("x");
    EwmaDetector::Options probe_options;
    probe_options.threshold = 1e9;  // never alarms, never restarts: mirrors e
    EwmaDetector probe("x", probe_options);
    int alarms = 0;
    for (int i = 0; i < 10000; ++i) {
      const double x = 0.35 + 0.01 * rng.normal();
      if (e.observe(i, x)) ++alarms;
      (void)probe.observe(i, x);
    }
    EXPECT_EQ(alarms, 0) << "seed " << seed;
    EXPECT_NEAR(probe.baseline_mean(), 0.35, 0.003);
    EXPECT_NEAR(probe.baseline_sigma(), 0.01, 0.002);
  }
}

TEST(EwmaDetector, LevelShiftCaughtThatZScoreMisses) {
  Rng rng(11);
  std::vector<double> v = gaussian(rng, 1000, 0.35, 0.01);
  for (int i = 500; i < 1000; ++i) v[i] += 3 * 0.01;  // 3 sigma slower from step 500 on
  EwmaDetector e("step_time");
  RollingZScore z("step_time");
  std::vector<Alarm> ewma_alarms;
  int zscore_alarms = 0;
  for (int i = 0; i < 1000; ++i) {
    if (auto a = e.observe(i, v[i])) ewma_alarms.push_back(*a);
    zscore_alarms += z.observe(i, v[i]).has_value();
  }
  // One alarm: after it the detector relearns the new level instead of repeating itself.
  ASSERT_EQ(ewma_alarms.size(), 1u);
  EXPECT_GE(ewma_alarms[0].step, 500);
  EXPECT_LE(ewma_alarms[0].step, 515);
  EXPECT_GT(ewma_alarms[0].level, 0.35);
  EXPECT_NEAR(ewma_alarms[0].baseline, 0.35, 0.004);
  EXPECT_NE(ewma_alarms[0].message.find("step_time level shift up at step"), std::string::npos);
  EXPECT_EQ(zscore_alarms, 0);
  std::printf("3-sigma shift at step 500: EWMA alarm at step %lld (%s)\n",
              static_cast<long long>(ewma_alarms[0].step), ewma_alarms[0].message.c_str());
}

TEST(EwmaDetector, SlowDriftCaught) {
  Rng rng(12);
  EwmaDetector e("grad_norm");
  int64_t first = -1;
  for (int i = 0; i < 1000 && first < 0; ++i) {
    // From step 400 the mean creeps up by 0.05 sigma per step.
    const double drift = i < 400 ? 0.0 : 0.05 * (i - 400);
    if (auto a = e.observe(i, 1.0 + 0.1 * (rng.normal() + drift))) first = a->step;
  }
  EXPECT_GT(first, 400);
  EXPECT_LT(first, 500);
}

TEST(EwmaDetector, SingleSpikeIsTheZScoresJob) {
  Rng rng(13);
  std::vector<double> v = gaussian(rng, 600, 1.0, 0.1);
  v[300] = 1.0 + 20 * 0.1;  // clipped to 4 sigma on the way in: moves the level 0.4 sigma
  EwmaDetector e("x");
  for (int i = 0; i < 600; ++i) EXPECT_FALSE(e.observe(i, v[i]).has_value()) << i;
}

TEST(EwmaDetector, WarmupAndDirection) {
  Rng rng(14);
  EwmaDetector warming("x");
  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(warming.observe(i, (i < 40 ? 1.0 : 5.0) + 0.01 * rng.normal()).has_value());
  }
  EwmaDetector::Options options;
  options.direction = Direction::kDown;
  for (double shift : {+0.1, -0.1}) {  // 10 sigma up, then down
    EwmaDetector e("x", options);
    std::vector<Alarm> alarms;
    for (int i = 0; i < 400; ++i) {
      const double x = 1.0 + (i < 200 ? 0.0 : shift) + 0.01 * rng.normal();
      if (auto a = e.observe(i, x)) alarms.push_back(*a);
    }
    if (shift > 0) {
      EXPECT_TRUE(alarms.empty());  // not watched
    } else {
      ASSERT_EQ(alarms.size(), 1u);
      EXPECT_GE(alarms[0].step, 200);
      EXPECT_LE(alarms[0].step, 203);
      EXPECT_LT(alarms[0].score, -5.0);
      EXPECT_NE(alarms[0].message.find("level shift down"), std::string::npos);
    }
  }
}

// ---- SeriesMonitor ----

struct TrainingRun {
  std::vector<double> loss, grad_norm, step_time;
};

// A late-training run: loss decaying slowly around 2, grad norm near 1, step time 0.35 s.
TrainingRun clean_run(uint64_t seed, int steps) {
  Rng rng(seed);
  TrainingRun run;
  for (int i = 0; i < steps; ++i) {
    run.loss.push_back(2.0 + std::exp(-i / 20000.0) + 0.02 * rng.normal());
    run.grad_norm.push_back(1.0 + 0.05 * rng.normal());
    run.step_time.push_back(0.35 + 0.005 * rng.normal());
  }
  return run;
}

std::vector<Alarm> monitor_all(SeriesMonitor& monitor, const TrainingRun& run) {
  std::vector<Alarm> alarms;
  for (size_t i = 0; i < run.loss.size(); ++i) {
    for (auto& a : monitor.observe_step(static_cast<int64_t>(i), run.loss[i], run.grad_norm[i],
                                        run.step_time[i])) {
      alarms.push_back(std::move(a));
    }
  }
  return alarms;
}

TEST(SeriesMonitor, EightSigmaSpikeInEachSeriesCaughtAtItsStep) {
  TrainingRun run = clean_run(15, 8000);
  run.loss[4000] = 2.0 + std::exp(-4000 / 20000.0) + 8 * 0.02;
  run.grad_norm[5000] = 1.0 + 8 * 0.05;
  run.step_time[6000] = 0.35 + 8 * 0.005;
  SeriesMonitor monitor;
  const std::vector<Alarm> alarms = monitor_all(monitor, run);
  ASSERT_EQ(alarms.size(), 3u);
  EXPECT_EQ(alarms[0].series, "loss");
  EXPECT_EQ(alarms[0].step, 4000);
  EXPECT_EQ(alarms[1].series, "grad_norm");
  EXPECT_EQ(alarms[1].step, 5000);
  EXPECT_EQ(alarms[2].series, "step_time");
  EXPECT_EQ(alarms[2].step, 6000);
  for (const Alarm& a : alarms) {
    EXPECT_EQ(a.detector, "zscore");
    std::printf("%s\n", a.message.c_str());
  }
}

TEST(SeriesMonitor, NoAlarmOnTenThousandCleanSteps) {
  for (uint64_t seed : {16, 17}) {
    SeriesMonitor monitor;
    const std::vector<Alarm> alarms = monitor_all(monitor, clean_run(seed, 10000));
    EXPECT_TRUE(alarms.empty()) << alarms.front().message;
  }
}

TEST(SeriesMonitor, FallingLossAndFasterStepsAreGoodNews) {
  TrainingRun run = clean_run(18, 2000);
  run.loss[1000] -= 20 * 0.02;
  run.step_time[1500] = 0.2;
  for (int i = 1600; i < 2000; ++i) run.grad_norm[i] -= 0.3;  // a shift down
  SeriesMonitor monitor;
  EXPECT_TRUE(monitor_all(monitor, run).empty());
}

TEST(SeriesMonitor, SensitivityScalesThresholds) {
  TrainingRun run = clean_run(19, 1000);
  run.step_time[700] = 0.35 + 8 * 0.005;
  SeriesMonitor::Options dull;
  dull.step_time_sensitivity = 0.0;  // threshold 12: an 8-sigma spike passes
  SeriesMonitor dull_monitor(dull);
  EXPECT_TRUE(monitor_all(dull_monitor, run).empty());

  run.step_time[700] = 0.35 + 4.5 * 0.005;
  SeriesMonitor default_monitor;
  EXPECT_TRUE(monitor_all(default_monitor, run).empty());
  SeriesMonitor::Options keen;
  keen.step_time_sensitivity = 1.0;  // threshold 3: a 4.5-sigma spike alarms
  SeriesMonitor keen_monitor(keen);
  const std::vector<Alarm> alarms = monitor_all(keen_monitor, run);
  ASSERT_FALSE(alarms.empty());
  EXPECT_TRUE(std::any_of(alarms.begin(), alarms.end(),
                          [](const Alarm& a) { return a.series == "step_time" && a.step == 700; }));
}

TEST(SeriesMonitor, NanLossReportedOnce) {
  TrainingRun run = clean_run(20, 300);
  run.loss[250] = std::nan("");
  SeriesMonitor monitor;
  const std::vector<Alarm> alarms = monitor_all(monitor, run);
  ASSERT_EQ(alarms.size(), 1u);
  EXPECT_EQ(alarms[0].detector, "nonfinite");
  EXPECT_EQ(alarms[0].message, "loss is nan at step 250");
}

}  // namespace
}  // namespace cann::monitor

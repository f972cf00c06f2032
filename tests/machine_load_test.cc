// The busy verdict of `bench calibrate` (core/machine_load.h) on readings made up to sit on
// each side of every limit, and /proc/loadavg read for real.
#include <gtest/gtest.h>

#include "core/machine_load.h"

namespace cann {
namespace {

MeasurementNoise quiet() {
  MeasurementNoise n;
  n.before = {0.3, 1, true};  // only the reader runnable
  n.after = {0.9, 1, true};
  n.max_spread = 0.03;
  n.max_spread_of = "GEMM 1024x1024x1024";
  n.min_cpu_share = 0.98;
  return n;
}

TEST(MachineLoadTest, SpreadAndMedian) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(spread({10, 11, 9}), 0.2);  // (11 - 9) / 10
  EXPECT_DOUBLE_EQ(spread({5}), 0);
  EXPECT_DOUBLE_EQ(spread({}), 0);
}

TEST(MachineLoadTest, QuietMachineHasNoReasons) {
  EXPECT_EQ(busy_reasons(quiet(), 8, 8), "");
  // Others may use the cores the measurement leaves free: 3 others, 4 of 8 cores used.
  MeasurementNoise n = quiet();
  n.before.runnable = 4;
  EXPECT_EQ(busy_reasons(n, 8, 4), "");
  // An unreadable /proc/loadavg judges nothing.
  n.before = {5, 40, false};
  EXPECT_EQ(busy_reasons(n, 8, 8), "");
}

TEST(MachineLoadTest, EachSignNamesWhatWasSeen) {
  MeasurementNoise n = quiet();
  n.before.runnable = 4;  // 3 others, 4 of 8 cores used: fine; of 8 used: busy
  EXPECT_EQ(busy_reasons(n, 8, 8),
            "3 other runnable tasks before measuring (load average 0.30) on 8 cores, 0 left free");
  n = quiet();
  n.after.runnable = 3;
  n.own_after = 1;
  EXPECT_NE(busy_reasons(n, 2, 1).find("2 other runnable tasks after measuring"),
            std::string::npos);
  n = quiet();
  n.max_spread = kMaxSpread * 1.5;
  // Alone, it names the processor as the cause: nothing else ran and every process had its core.
  EXPECT_EQ(busy_reasons(n, 8, 8),
            "GEMM 1024x1024x1024 spread 15% between repeats (limit 10%) with no other task "
            "running here and each measuring process on its own core: the processor's speed "
            "itself varied (a shared or throttled host)");
  n.max_spread = kMaxSpread * 0.99;
  EXPECT_EQ(busy_reasons(n, 8, 8), "");
  n = quiet();
  n.min_cpu_share = 0.5;
  EXPECT_NE(busy_reasons(n, 8, 8).find("got 50% of its core (limit 85%)"), std::string::npos);
  // All at once, joined in one phrase.
  n.max_spread = 0.4;
  n.before.runnable = 9;
  const std::string all = busy_reasons(n, 8, 8);
  EXPECT_NE(all.find("8 other runnable tasks before"), std::string::npos) << all;
  EXPECT_NE(all.find("; GEMM 1024x1024x1024 spread 40%"), std::string::npos) << all;
  EXPECT_NE(all.find("; a measuring process got 50%"), std::string::npos) << all;
}

TEST(MachineLoadTest, ReadsProcLoadavg) {
  const LoadReading r = sample_load(3, 0.01);
  ASSERT_TRUE(r.ok);
  EXPECT_GE(r.runnable, 1);  // the reader itself
  EXPECT_GE(r.load1, 0);
}

}  // namespace
}  // namespace cann

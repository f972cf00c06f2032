// `cann-train bench comm` as a benchmark under the rules of docs/benchmarks.md: every size timed
// several times (median and min..max), the machine and the load printed, raw Gloo beside each
// all-reduce as a ratio, and the target's verdict deciding the exit status.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace cann {
namespace {

// The table's rows: backend -> the whitespace-separated fields of its line.
std::vector<std::vector<std::string>> rows_of(const std::string& output) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("shm ", 0) != 0 && line.rfind("gloo", 0) != 0) continue;
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    rows.push_back(f);
  }
  return rows;
}

TEST(MultiProcBenchComm, RepeatsShowSpreadRatioAndTheVerdictSetsTheExitStatus) {
  const test::CommandResult r =
      test::run_cann({"bench", "comm", "--nproc", "2", "--backend", "shm", "--op", "allreduce",
                      "--sizes", "64M:64M", "--repeat", "3", "--seconds-per-size", "0.05"},
                     240);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.output.find("each size timed 3 times"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# machine: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" cores, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1-minute load average"), std::string::npos) << r.output;
  // backend op size count time min..max algbw busbw ratio
  const auto rows = rows_of(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  const auto& shm = rows[0];
  const auto& raw = rows[1];
  ASSERT_EQ(shm.size(), 9u) << r.output;
  ASSERT_EQ(raw.size(), 9u) << r.output;
  EXPECT_EQ(shm[0], "shm");
  EXPECT_EQ(raw[0], "gloo-raw");
  // The median lies within the range of the repeats.
  for (const auto* row : {&shm, &raw}) {
    const std::string& range = (*row)[5];
    const size_t dots = range.find("..");
    ASSERT_NE(dots, std::string::npos) << range;
    const double lo = std::atof(range.substr(0, dots).c_str());
    const double hi = std::atof(range.substr(dots + 2).c_str());
    const double med = std::atof((*row)[4].c_str());
    EXPECT_LE(lo, med + 0.1) << range;
    EXPECT_GE(hi, med - 0.1) << range;
  }
  // The ratio is the two bus bandwidths of the table, one formula for both.
  const double ratio = std::atof(shm[8].c_str());
  EXPECT_NEAR(ratio, std::atof(shm[7].c_str()) / std::atof(raw[7].c_str()), 0.02 * ratio);
  EXPECT_EQ(raw[8], "-");
  const bool pass = r.output.find("PASS  shm all-reduce at 64M") != std::string::npos;
  const bool fail = r.output.find("FAIL  shm all-reduce at 64M") != std::string::npos;
  ASSERT_NE(pass, fail) << r.output;
  EXPECT_EQ(pass, ratio >= 3.0) << r.output;
  EXPECT_EQ(r.exit_code, pass ? 0 : 1) << r.output;
}

TEST(MultiProcBenchComm, SizesBelowTheTargetJudgeNothingAndExitZero) {
  const test::CommandResult r =
      test::run_cann({"bench", "comm", "--nproc", "2", "--backend", "shm", "--op", "allreduce",
                      "--sizes", "4K:16K", "--repeat", "2", "--seconds-per-size", "0.02"},
                     120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("each size timed 2 times"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("none judged"), std::string::npos) << r.output;
  EXPECT_EQ(rows_of(r.output).size(), 4u) << r.output;  // shm and raw Gloo at 4K and 16K
}

TEST(BenchCommUsage, ZeroRepeatsIsAUsageError) {
  test::expect_one_line_error(test::run_cann({"bench", "comm", "--repeat", "0"}, 60), 2,
                              {"--repeat"});
}

}  // namespace
}  // namespace cann

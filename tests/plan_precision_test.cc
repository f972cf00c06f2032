// The planner and `run --precision bf16` on the CPU engine: an fp32 cluster with a measured
// bf16 GEMM rate prices the linear layers at that rate and nothing else differently (the
// engine keeps every tensor in fp32, so memory is the same to the byte); a cluster without the
// rate, or fp8 on the engine, is refused in one line.
#include <gtest/gtest.h>

#include <string>

#include "plan/plan_file.h"
#include "plan/plan_input.h"
#include "plan/predict.h"
#include "plan/strategy.h"
#include "test_util.h"

namespace cann::plan {
namespace {

std::string cpu_cluster(const test::TempDir& dir, double bf16_tflops) {
  const std::string path = dir.file("cpu.yaml");
  test::write_text(path, "name: cpu\nnodes: 1\ndevices_per_node: 2\n"
                         "device: {name: cpu-core, peak_tflops: 0.1, bf16_gemm_tflops: " +
                             std::to_string(bf16_tflops) +
                             ", memory_gb: 8, memory_bandwidth_GBps: 10, compute_units: 1, "
                             "precision: fp32}\n"
                             "intra_node: {bandwidth_GBps: 5, latency_us: 3}\n");
  return path;
}

StatusOr<PlanInput> gpt_tiny_on(const std::string& cluster, const std::string& precision) {
  PlanOverrides o;
  o.precision = precision;
  return load_plan_input("gpt_tiny", cluster, o);
}

Prediction predicted(const std::string& cluster, const std::string& precision) {
  auto in = gpt_tiny_on(cluster, precision);
  EXPECT_TRUE(in.ok()) << in.status().message();
  Strategy s;
  s.dp = 2;
  s.mbs = 4;
  s.gbs = 16;
  auto p = predict(*in, s, Fidelity::kExact);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

TEST(PlanPrecisionTest, Bf16GemmsChangeOnlyTheGemmTime) {
  test::TempDir dir;
  const std::string cluster = cpu_cluster(dir, 0.2);
  const Prediction fp32 = predicted(cluster, "");
  const Prediction bf16 = predicted(cluster, "bf16");
  EXPECT_EQ(bf16.memory_peak_bytes, fp32.memory_peak_bytes);
  EXPECT_EQ(bf16.time.stream_s, fp32.time.stream_s);
  EXPECT_EQ(bf16.time.dp_comm_s, fp32.time.dp_comm_s);
  // Linear layers at twice the rate; attention's GEMMs stay fp32.
  EXPECT_LT(bf16.time.gemm_s, 0.75 * fp32.time.gemm_s);
  EXPECT_GT(bf16.time.gemm_s, 0.5 * fp32.time.gemm_s);
  EXPECT_LT(bf16.step_time_s, fp32.step_time_s);
  // MFU against the precision's own rate: the model FLOPs per second over 0.2, not 0.1.
  EXPECT_NEAR(bf16.mfu, bf16.model_tflops_per_device / 0.2, 1e-12);
  EXPECT_NEAR(fp32.mfu, fp32.model_tflops_per_device / 0.1, 1e-12);
}

TEST(PlanPrecisionTest, WithoutAMeasuredRateOrInFp8ItIsRefused) {
  test::TempDir dir;
  auto in = gpt_tiny_on(cpu_cluster(dir, 0), "bf16");
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("without a measured bf16 GEMM rate; hint: rerun "
                                       "`cann-train bench calibrate`"),
            std::string::npos)
      << in.status().message();
  auto fp8 = gpt_tiny_on(cpu_cluster(dir, 0.2), "fp8");
  ASSERT_FALSE(fp8.ok());
  EXPECT_NE(fp8.status().message().find("plan fp8 on an accelerator cluster"), std::string::npos)
      << fp8.status().message();
}

// A plan of the engine records the GEMM precision it priced, so `run --plan` trains it (and
// refuses a --precision that disagrees); a value the engine does not train is refused.
TEST(PlanPrecisionTest, PlanFilesCarryTheEnginesPrecision) {
  test::TempDir dir;
  const std::string cluster = cpu_cluster(dir, 0.2);
  auto in = gpt_tiny_on(cluster, "bf16");
  ASSERT_TRUE(in.ok()) << in.status().message();
  const Prediction p = predicted(cluster, "bf16");
  const std::string path = dir.file("plan.yaml");
  const PlanFile f = make_plan_file(*in, p, "gpt_tiny", cluster, path);
  EXPECT_EQ(f.precision, "bf16");
  ASSERT_TRUE(write_plan_file(path, f).ok());
  auto back = read_plan_file(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->precision, "bf16");
  auto fp32_in = gpt_tiny_on(cluster, "");
  ASSERT_TRUE(fp32_in.ok());
  EXPECT_EQ(make_plan_file(*fp32_in, p, "gpt_tiny", cluster, path).precision, "fp32");

  std::string text = test::read_text(path);
  text.replace(text.find("precision: bf16"), 15, "precision: fp16");
  test::write_text(path, text);
  auto bad = read_plan_file(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("precision 'fp16': the engine trains fp32 or bf16 GEMMs"),
            std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace cann::plan

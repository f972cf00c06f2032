// --precision bf16 under every parallel layout `run` trains: each rank rounds its own GEMM
// inputs, so a layout trains as it does in fp32, with a loss that follows fp32's.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "run_args.h"
#include "test_util.h"

namespace cann {
namespace {

// The final training loss of "done: steps 1..N, loss A -> B"; -1 when absent.
double final_loss(const std::string& output) {
  const size_t at = output.find("done: steps");
  if (at == std::string::npos) return -1;
  const size_t arrow = output.find("-> ", at);
  return arrow == std::string::npos ? -1 : std::stod(output.substr(arrow + 3));
}

TEST(MultiProcBf16Test, EveryLayoutTrainsAndFollowsFp32) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "this processor has no AVX-512 BF16";
  struct Layout {
    const char* model;
    const char* strategy;
    std::vector<std::string> more;
  };
  const std::vector<Layout> layouts = {
      {"gpt_tiny", "dp=2", {"--compress", "bf16"}},
      {"gpt_tiny", "dp=2,zero=3", {}},
      {"gpt_tiny", "tp=2,sp=on", {}},
      {"gpt_tiny", "pp=2,mbs=2", {}},
      {"gpt_tiny", "cp=2", {}},
      {"moe_bert_tiny", "dp=2,ep=2", {}},
  };
  for (const Layout& l : layouts) {
    double loss[2];
    for (int p = 0; p < 2; ++p) {
      const auto r = test::run_cann(test::RunArgs()
                                        .comparison_run(l.model, 30)
                                        .nproc(2)
                                        .threads(1)
                                        .strategy(l.strategy)
                                        .sample_tokens(0)
                                        .flags(l.more)
                                        .flag("--precision", p == 0 ? "fp32" : "bf16"),
                                    180);
      ASSERT_EQ(r.exit_code, 0) << l.strategy << "\n" << r.output;
      if (p == 1) {
        EXPECT_NE(r.output.find("linear layers on oneDNN bf16"), std::string::npos) << r.output;
      }
      loss[p] = final_loss(r.output);
      ASSERT_GT(loss[p], 0) << r.output;
    }
    std::printf("%s %s: loss after 30 steps fp32 %.4f, bf16 %.4f\n", l.model, l.strategy, loss[0],
                loss[1]);
    EXPECT_NE(loss[1], loss[0]) << l.strategy;
    EXPECT_NEAR(loss[1], loss[0], 0.03 * loss[0]) << l.strategy;
  }
}

}  // namespace
}  // namespace cann

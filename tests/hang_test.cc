// Hang diagnosis against a really stopped rank: three workers train; rank 2 gets SIGSTOP, so
// ranks 0 and 1 block in the next gradient all-reduce. `cann-train debug hang` must name the
// collective, the waiting ranks and rank 2 as never having entered it; and when the collective
// times out, the survivors' errors carry the same analysis.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include "run_args.h"
#include "test_util.h"

namespace cann {
namespace {

// The worker of rank `rank` started by agent `agent` (its environment says RANK=<rank>).
pid_t find_worker(pid_t agent, int rank) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != agent) continue;
    std::ifstream env(e.path() / "environ");
    std::string vars((std::istreambuf_iterator<char>(env)), {});
    // "RANK=<r>" must start a variable ("LOCAL_RANK=<r>" contains it too).
    size_t pos = 0;
    while ((pos = vars.find("RANK=" + std::to_string(rank) + '\0', pos)) != std::string::npos) {
      if (pos == 0 || vars[pos - 1] == '\0') return std::stoi(name);
      ++pos;
    }
  }
  return -1;
}

pid_t find_agent(const std::string& marker) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmd(e.path() / "cmdline");
    std::string c((std::istreambuf_iterator<char>(cmd)), {});
    if (c.find("--nproc-per-node") != std::string::npos && c.find(marker) != std::string::npos &&
        c.find("/proc/self/exe") == std::string::npos)
      return std::stoi(name);
  }
  return -1;
}

TEST(MultiProcHangTest, StoppedRankIsNamed) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"),
                   "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 1\n"
                   "num_attention_heads: 2\nvocab_size: 256\nseq_length: 32\n");
  const std::vector<std::string> env = {"CANN_TRAIN_HOME=" + dir.file("home")};
  test::RunArgs run;
  run.model(dir.file("m.yaml")).steps(1000000).batch_size(6).seq_len(16).quiet();
  run.sample_tokens(0).nproc(3).flag("--comm-timeout", 6);
  std::vector<std::string> argv = {CANN_TRAIN_BINARY};
  argv.insert(argv.end(), run.args().begin(), run.args().end());
  auto job = std::async(std::launch::async, [&] { return test::run_command(argv, 120, env); });
  pid_t agent = -1, victim = -1;
  for (int i = 0; i < 100 && victim < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (agent < 0) agent = find_agent(dir.path());
    if (agent > 0) victim = find_worker(agent, 2);
  }
  ASSERT_GT(victim, 0) << "rank 2 not found";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // training, beacons flowing
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  // Long enough for rank 2's beacon to go stale (3 s) and the others to block.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  const auto hang = test::run_command({CANN_TRAIN_BINARY, "debug", "hang"}, 30, env);
  // Then the collective times out (6 s) and the survivors explain it on their way out.
  std::this_thread::sleep_for(std::chrono::milliseconds(4000));
  kill(victim, SIGKILL);
  const auto result = job.get();

  std::printf("%s", hang.output.c_str());
  EXPECT_EQ(hang.exit_code, 0) << hang.output;
  EXPECT_NE(hang.output.find("in group world: ranks 0,1 waiting since"), std::string::npos)
      << hang.output;
  EXPECT_NE(hang.output.find("rank 2 never entered (last completed #"), std::string::npos)
      << hang.output;
  EXPECT_NE(hang.output.find("stopped, hung or dead"), std::string::npos) << hang.output;
  EXPECT_NE(result.output.find("hang analysis:"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("rank 2 never entered"), std::string::npos) << result.output;
  EXPECT_NE(result.exit_code, 0);
}

TEST(HangCommandTest, NoRunningJobIsAClearError) {
  test::TempDir dir;
  const auto r = test::run_command({CANN_TRAIN_BINARY, "debug", "hang"}, 30,
                                   {"CANN_TRAIN_HOME=" + dir.file("home")});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no running cann-train job"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace cann

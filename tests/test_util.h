// Helpers shared by the tests: scratch directories, running the cann-train binary as a user
// would (capturing output and exit status, with a timeout), and random fills.
#pragma once

#include <string>
#include <vector>

#include "core/rng.h"
#include "model/param_table.h"
#include "model/spec.h"

namespace cann::test {

// A fresh empty directory under $TMPDIR (or /tmp), removed when the object goes away.
class TempDir {
 public:
  // Under `base` when given, else TMPDIR or /tmp.
  explicit TempDir(const std::string& prefix = "cann-test", const std::string& base = "");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;  // 128 + signal when killed by a signal; -1 on timeout
  bool timed_out = false;
  std::string output;  // stdout and stderr interleaved
};

// Runs argv (argv[0] is a path) with the environment plus `env` ("K=V" entries), for at most
// timeout_s seconds (then SIGKILL).
CommandResult run_command(const std::vector<std::string>& argv, double timeout_s = 300,
                          const std::vector<std::string>& env = {});
// Runs the cann-train binary built alongside the tests with the given arguments.
CommandResult run_cann(const std::vector<std::string>& args, double timeout_s = 300);

// Runs `run --steps 2 --monitor off --quiet` with each flag list and expects a usage error:
// exit 2 and one line of output that carries a hint.
void expect_run_usage_errors(const std::vector<std::vector<std::string>>& flag_lists);

// Expects a failure of exit status `exit_code` that is one line starting with `prefix` and
// containing every one of `parts`.
void expect_one_line_error(const CommandResult& r, int exit_code,
                           const std::vector<std::string>& parts,
                           const std::string& prefix = "cann-train ");

// A TCP port for a test's server: below the kernel's ephemeral range (32768 up), where the
// outgoing connections of tests running beside it take their ports, spread by the process id
// and free when asked (bound and released once on every address).
int free_tcp_port();

// Writes `text` to `path`, making its directory first.
void write_text(const std::string& path, const std::string& text);
std::string read_text(const std::string& path);
// The line of `out` that starts at the first occurrence of `start` (to its end), or "".
std::string line_with(const std::string& out, const std::string& start);

template <typename F>
void fill_normal(std::vector<F>& v, Rng& rng, double scale = 1.0) {
  for (auto& x : v) x = static_cast<F>(rng.normal() * scale);
}

// `count` batches of `tokens` random token ids and targets (a bert model leaves about 60% of
// its targets unscored, -1), drawn from Rng(seed) batch by batch.
struct RandomBatches {
  std::vector<std::vector<int>> inputs, targets;
};
RandomBatches random_batches(const model::ModelSpec& s, int count, int tokens, uint64_t seed);

// Per tensor of `table`, the largest |got - ref| over the tensor's largest |ref|: expects each
// below `tol` (the failure names `what` and the tensor) and returns the worst.
double expect_tensors_close(const model::ParamTable& table, const std::vector<float>& ref,
                            const std::vector<float>& got, double tol, const std::string& what);

}  // namespace cann::test

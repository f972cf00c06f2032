// RunArgs: the argument list of a `cann-train run` a test starts, built by name instead of
// spelled out flag by flag in every file:
//
//   test::run_cann(test::RunArgs().model("gpt_tiny").steps(2).nproc(2).strategy("tp=2").quiet())
//
// It starts from `run --monitor off`: no test serves a dashboard unless it asks for one.
#pragma once

#include <string>
#include <vector>

namespace cann::test {

class RunArgs {
 public:
  RunArgs() : args_{"run", "--monitor", "off"} {}

  RunArgs& flag(const std::string& name) {
    args_.push_back(name);
    return *this;
  }
  RunArgs& flag(const std::string& name, const std::string& value) {
    args_.push_back(name);
    args_.push_back(value);
    return *this;
  }
  RunArgs& flag(const std::string& name, int value) { return flag(name, std::to_string(value)); }
  RunArgs& flags(const std::vector<std::string>& more) {
    args_.insert(args_.end(), more.begin(), more.end());
    return *this;
  }

  RunArgs& model(const std::string& m) { return flag("--model", m); }
  RunArgs& data(const std::string& d) { return flag("--data", d); }
  RunArgs& steps(int n) { return flag("--steps", n); }
  RunArgs& batch_size(int n) { return flag("--batch-size", n); }
  RunArgs& seq_len(int n) { return flag("--seq-len", n); }
  RunArgs& strategy(const std::string& s) { return flag("--strategy", s); }
  RunArgs& nproc(int n) { return flag("--nproc-per-node", n); }
  RunArgs& threads(int n) { return flag("--threads", n); }
  RunArgs& eval_every(int n) { return flag("--eval-every", n); }
  RunArgs& sample_tokens(int n) { return flag("--sample-tokens", n); }
  RunArgs& log_json(const std::string& path) { return flag("--log-json", path); }
  RunArgs& quiet() { return flag("--quiet"); }
  // Serves the monitors of `spec` (`--monitor SPEC`) instead of none.
  RunArgs& monitor(const std::string& spec) {
    args_[2] = spec;
    return *this;
  }

  // The runs multi-process tests hold against one process: `steps` steps of `model` on
  // batches of 8 sequences of 64 tokens, no evaluation on the way.
  RunArgs& comparison_run(const std::string& m, int n) {
    return model(m).seq_len(64).steps(n).batch_size(8).eval_every(0);
  }

  const std::vector<std::string>& args() const { return args_; }
  operator const std::vector<std::string>&() const { return args_; }

 private:
  std::vector<std::string> args_;
};

}  // namespace cann::test

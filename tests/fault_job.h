// Helpers of the fault-injection suites: a `cann-train run` job in the background whose workers
// a test finds by rank and signals (SIGKILL, SIGSTOP), and readers of its JSONL step log (the
// steps trained, the agent's and workers' fault-tolerance events).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "run_args.h"
#include "test_util.h"

namespace cann::test {

// The jobs of the fault suites: `steps` steps of the model in dir/m.yaml on `nproc` workers of
// one thread, batches of 8 sequences of 32 tokens, no evaluation on the way and no sample, the
// step log in dir/log.jsonl and checkpoints in dir/ck.
inline RunArgs fault_job(const std::string& dir, int steps, int nproc) {
  return RunArgs()
      .model(dir + "/m.yaml")
      .steps(steps)
      .batch_size(8)
      .seq_len(32)
      .sample_tokens(0)
      .eval_every(0)
      .flag("--eval-batches", 1)
      .threads(1)
      .nproc(nproc)
      .flag("--checkpoint-dir", dir + "/ck")
      .log_json(dir + "/log.jsonl");
}

// Wall-clock seconds since the epoch, the clock of the step log's event times.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A job running in the background: the agent's pid, its output in a file (dir/out.txt).
class Job {
 public:
  // `binary`: the program to run (another agent than cann-train's: a user's program).
  Job(const std::string& dir, std::vector<std::string> args,
      const std::string& binary = CANN_TRAIN_BINARY)
      : dir_(dir) {
    std::vector<std::string> argv = {binary};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string out = dir + "/out.txt";
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
  }
  ~Job() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Exit status of the agent (-1 on timeout, after which the agent is killed).
  int wait(double timeout_s = 120) {
    const double end = now_s() + timeout_s;
    int status = 0;
    while (now_s() < end) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  std::string output() const { return read_text(dir_ + "/out.txt"); }

  // The pid of the worker with RANK=rank (a child of the agent), or -1.
  pid_t worker(int rank) const {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(e.path() / "stat");
      std::string line;
      std::getline(stat, line);
      const size_t close = line.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 2));
      char state;
      int ppid = 0;
      rest >> state >> ppid;
      if (ppid != pid_) continue;
      std::ifstream env(e.path() / "environ");
      std::string all((std::istreambuf_iterator<char>(env)), {});
      if (all.find(std::string("RANK=") + std::to_string(rank) + '\0') == 0 ||
          all.find(std::string("\0RANK=", 6) + std::to_string(rank) + '\0') != std::string::npos)
        return std::stoi(name);
    }
    return -1;
  }

  // Waits until the step log holds step `step`; false on timeout.
  bool wait_for_step(int step, double timeout_s = 60) const {
    const std::string needle = "\"step\":" + std::to_string(step) + ",";
    const double end = now_s() + timeout_s;
    while (now_s() < end) {
      if (read_text(dir_ + "/log.jsonl").find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }
  bool wait_for_output(const std::string& text, double timeout_s = 30) const {
    const double end = now_s() + timeout_s;
    while (now_s() < end) {
      if (output().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  // Sends `sig` to rank's worker; returns the time it was sent (0 if not found).
  double signal_rank(int rank, int sig) const {
    for (int i = 0; i < 500; ++i) {
      const pid_t p = worker(rank);
      if (p > 0) {
        const double t = now_s();
        kill(p, sig);
        return t;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

inline std::vector<nlohmann::json> events(const std::string& log_path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(log_path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("event")) out.push_back(j);
  }
  return out;
}

// The steps logged, in order (a recovery repeats the steps after the committed one).
inline std::vector<int> logged_steps(const std::string& log_path) {
  std::vector<int> out;
  std::ifstream in(log_path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && !j.contains("event"))
      out.push_back(j["step"].get<int>());
  }
  return out;
}

inline const nlohmann::json* find_event(const std::vector<nlohmann::json>& ev,
                                        const std::string& name, int generation) {
  for (const auto& e : ev)
    if (e["event"] == name && e["generation"] == generation) return &e;
  return nullptr;
}

}  // namespace cann::test

// Launching a cann-train child and sampling its workers' peak memory.
#include "cli/child_run.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/fs.h"
#include "core/timer.h"
#include "plan/plan_vs_real.h"

namespace cann::cli {
namespace {

// /proc files report a size of 0, so they are read as a stream, not by their size.
std::string read_proc(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Children of every thread of `pid` (the agent may fork from any of its threads).
std::vector<int> children_of(int pid) {
  std::vector<int> kids;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(task_dir.c_str());
  if (d == nullptr) return kids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::stringstream in(read_proc(task_dir + "/" + e->d_name + "/children"));
    int kid = 0;
    while (in >> kid) kids.push_back(kid);
  }
  closedir(d);
  return kids;
}

double hwm_mib(int pid) {
  return plan::read_vm_hwm_mib(read_proc("/proc/" + std::to_string(pid) + "/status"));
}

}  // namespace

StatusOr<ChildRun> run_child(const std::vector<std::string>& args, const std::string& output_path,
                             double timeout_s, bool agent) {
  const int out = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out < 0) return IoError(output_path + ": cannot create the run's output file");
  std::vector<std::string> argv_text = {"cann-train"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  const double t0 = now_seconds();
  const pid_t pid = fork();
  if (pid < 0) {
    close(out);
    return Internal("cannot start `cann-train " + args.front() + "` (fork failed)");
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own group, so a time-out kills the workers too
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(out);
  setpgid(pid, pid);
  ChildRun r;
  std::map<int, double> hwm;  // worker pid -> largest VmHWM seen
  int status = 0;
  bool done = false;
  while (!done) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    const std::vector<int> workers = agent ? children_of(pid) : std::vector<int>{pid};
    for (int p : workers) hwm[p] = std::max(hwm[p], hwm_mib(p));
    if (now_seconds() - t0 > timeout_s) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      done = true;
      r.exit_code = -1;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.wall_s = now_seconds() - t0;
  if (!done) r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  for (const auto& [p, mib] : hwm)
    if (mib > 0) r.worker_hwm_mib.push_back(mib);
  std::sort(r.worker_hwm_mib.rbegin(), r.worker_hwm_mib.rend());
  auto text = read_file(output_path);
  if (text.ok()) r.output = std::move(*text);
  return r;
}

}  // namespace cann::cli

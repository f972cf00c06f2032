// fork/exec, pipes and exit statuses of worker processes.
#include "elastic/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/fs.h"
#include "core/log.h"

namespace cann::elastic {

std::string random_id() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + sigabbrev_np(sig) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

bool failed(int status) {
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f s", s);
  return buf;
}

StatusOr<pid_t> spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
                      int out_fd, int err_fd) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return IoError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // A worker must not outlive its agent.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    signal(SIGINT, SIG_IGN);  // Ctrl-C reaches the agent, which forwards SIGTERM
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv;
    static const char kSelf[] = "/proc/self/exe";
    argv.push_back(const_cast<char*>(kSelf));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(kSelf, argv.data());
    std::fprintf(stderr, "cannot exec the worker: %s\n", std::strerror(errno));
    _exit(127);
  }
  return pid;
}

Status start_worker(Worker& w, const std::vector<std::string>& args,
                    const std::vector<std::string>& env, bool plain_rank0_stdout) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    return IoError(std::string("pipe failed: ") + std::strerror(errno));
  auto pid = spawn(args, env, out[1], err[1]);
  close(out[1]);
  close(err[1]);
  if (!pid.ok()) {
    close(out[0]);
    close(err[0]);
    return pid.status();
  }
  w.pid = *pid;
  w.running = true;
  w.out_fd = out[0];
  w.err_fd = err[0];
  fcntl(w.out_fd, F_SETFL, O_NONBLOCK);
  fcntl(w.err_fd, F_SETFL, O_NONBLOCK);
  w.out = std::make_unique<OutputForwarder>(stdout, std::string());
  w.err = std::make_unique<OutputForwarder>(stderr, std::string());
  label_output(w, plain_rank0_stdout);
  return OkStatus();
}

void label_output(Worker& w, bool plain_rank0_stdout) {
  const std::string prefix = "[rank " + std::to_string(w.rank) + "] ";
  if (w.out) w.out->set_prefix(plain_rank0_stdout && w.rank == 0 ? std::string() : prefix);
  if (w.err) w.err->set_prefix(prefix);
}

bool pump(int fd, OutputForwarder& fwd) {
  char buf[8192];
  const ssize_t n = read(fd, buf, sizeof(buf));
  if (n > 0) {
    fwd.write(std::string_view(buf, static_cast<size_t>(n)));
    return true;
  }
  return n < 0 && (errno == EAGAIN || errno == EINTR);
}

void drain(Worker& w) {
  for (int* fd : {&w.out_fd, &w.err_fd}) {
    while (*fd >= 0 && pump(*fd, fd == &w.out_fd ? *w.out : *w.err)) {
    }
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  if (w.out) w.out->finish();
  if (w.err) w.err->finish();
}

void pump_all(std::vector<Worker>& workers, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, bool>> owners;  // (worker, is_stdout)
  for (auto& w : workers) {
    if (w.out_fd >= 0) {
      fds.push_back({w.out_fd, POLLIN, 0});
      owners.push_back({&w, true});
    }
    if (w.err_fd >= 0) {
      fds.push_back({w.err_fd, POLLIN, 0});
      owners.push_back({&w, false});
    }
  }
  poll(fds.data(), fds.size(), timeout_ms);
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Worker& w = *owners[i].first;
    int& fd = owners[i].second ? w.out_fd : w.err_fd;
    if (!pump(fd, owners[i].second ? *w.out : *w.err)) {
      close(fd);
      fd = -1;
    }
  }
}

namespace {

constexpr char kSnapshotRootPrefix[] = "cann-train-snap-";

// The inode of this process's pid namespace (/proc/self/ns/pid reads "pid:[<inode>]"); 0
// when unknown. Pids name processes only within one namespace.
unsigned long long pid_namespace() {
  char link[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
  if (n <= 0) return 0;
  const char* open = std::strchr(link, '[');
  return open != nullptr ? std::strtoull(open + 1, nullptr, 10) : 0;
}

// "-p<pid>s<start ticks>n<pid namespace>-XXXXXX" at the end of a root's name: its creator.
// False when absent.
bool snapshot_root_owner(const std::string& name, long long* pid, long long* start,
                         unsigned long long* ns) {
  if (name.size() < 8 || name[name.size() - 7] != '-') return false;
  const std::string head = name.substr(0, name.size() - 7);
  const size_t p = head.rfind("-p");
  if (p == std::string::npos) return false;
  const size_t s = head.find('s', p + 2), n = head.find('n', p + 2);
  if (s == std::string::npos || n == std::string::npos || s == p + 2 || n <= s + 1 ||
      n + 1 == head.size())
    return false;
  for (size_t i = p + 2; i < head.size(); ++i)
    if (i != s && i != n && (head[i] < '0' || head[i] > '9')) return false;
  *pid = std::atoll(head.substr(p + 2, s - p - 2).c_str());
  *start = std::atoll(head.substr(s + 1, n - s - 1).c_str());
  *ns = std::strtoull(head.substr(n + 1).c_str(), nullptr, 10);
  return true;
}

// The fields of /proc/<pid>/stat from the third (the state) on, after the command name (which
// may hold spaces and parentheses); empty when there is no such process.
std::string stat_fields(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return std::string();
  char line[1024] = {};
  const bool got = std::fgets(line, sizeof(line), f) != nullptr;
  std::fclose(f);
  const char* close = got ? std::strrchr(line, ')') : nullptr;
  return close != nullptr && close[1] == ' ' ? std::string(close + 2) : std::string();
}

}  // namespace

long long process_start_ticks(pid_t pid) {
  const std::string fields = stat_fields(pid);
  // The start time is the 22nd field.
  const char* at = fields.c_str();
  for (int field = 3; field <= 22 && *at != '\0'; ++field) {
    while (*at == ' ') ++at;
    if (field == 22) return std::atoll(at);
    while (*at != ' ' && *at != '\0') ++at;
  }
  return -1;
}

int sweep_stale_snapshot_roots(const std::string& base) {
  StatusOr<std::vector<std::string>> names = list_dir(base);
  if (!names.ok()) return 0;
  int removed = 0;
  const unsigned long long ns = pid_namespace();
  for (const std::string& name : *names) {
    if (name.rfind(kSnapshotRootPrefix, 0) != 0) continue;
    long long pid = 0, start = 0;
    unsigned long long owner_ns = 0;
    // Only roots made in this pid namespace: another container sharing the base names its
    // processes by other pids.
    if (!snapshot_root_owner(name, &pid, &start, &owner_ns) || pid <= 0 || ns == 0 ||
        owner_ns != ns)
      continue;
    if (process_start_ticks(static_cast<pid_t>(pid)) == start) continue;  // its creator lives
    if (remove_all(join_path(base, name)).ok()) ++removed;
  }
  return removed;
}

StatusOr<std::string> make_snapshot_root(const std::string& job) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = is_directory("/dev/shm") ? "/dev/shm" : (tmp ? tmp : "/tmp");
  if (const int stale = sweep_stale_snapshot_roots(base); stale > 0)
    log_info("removed " + std::to_string(stale) + " snapshot director" +
             (stale == 1 ? "y" : "ies") + " under " + base +
             " left by agents that ended without removing them (killed)");
  const pid_t self = getpid();
  std::string templ = base + "/" + kSnapshotRootPrefix + job.substr(0, 16) + "-p" +
                      std::to_string(self) + "s" + std::to_string(process_start_ticks(self)) + "n" +
                      std::to_string(pid_namespace()) + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr)
    return IoError(templ + ": cannot create the snapshot directory: " + std::strerror(errno) +
                   "; hint: check that /dev/shm or TMPDIR is writable");
  return std::string(buf.data());
}

bool process_stopped(pid_t pid) {
  const std::string fields = stat_fields(pid);
  return !fields.empty() && (fields[0] == 'T' || fields[0] == 't');
}

void signal_workers(std::vector<Worker>& workers, int sig) {
  for (auto& w : workers) {
    if (!w.running) continue;
    kill(w.pid, sig);
    // A stopped (SIGSTOP) worker would hold its SIGTERM, and the job, until the grace period
    // ends: let it run so it takes the signal now.
    if (sig == SIGTERM) kill(w.pid, SIGCONT);
    w.stopped_by_agent = true;
  }
}

}  // namespace cann::elastic

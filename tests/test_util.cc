// Test helpers: fork/exec with a pipe and a deadline.
#include "test_util.h"

#include "run_args.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace cann::test {

TempDir::TempDir(const std::string& prefix, const std::string& base) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ =
      (!base.empty() ? base : std::string(tmp && *tmp ? tmp : "/tmp")) + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

CommandResult run_command(const std::vector<std::string>& argv, double timeout_s,
                          const std::vector<std::string>& env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  CommandResult r;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      kill(pid, SIGKILL);
      r.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<long>(left, 1000))) > 0) {
      ssize_t n = read(fds[0], buf, sizeof(buf));
      if (n <= 0) break;
      r.output.append(buf, static_cast<size_t>(n));
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (r.timed_out) {
    r.exit_code = -1;
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.exit_code = 128 + WTERMSIG(status);
  }
  return r;
}

CommandResult run_cann(const std::vector<std::string>& args, double timeout_s) {
  std::vector<std::string> argv = {CANN_TRAIN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, timeout_s);
}

int free_tcp_port() {
  constexpr int kFirst = 20000, kCount = 12000;  // 20000..31999
  static int calls = 0;
  const int start = static_cast<int>((getpid() * 131 + 977 * calls++) % kCount);
  for (int i = 0; i < kCount; ++i) {
    const int port = kFirst + (start + i) % kCount;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    if (free) return port;
  }
  throw std::runtime_error("free_tcp_port: no free port in 20000..31999");
}

void write_text(const std::string& path, const std::string& text) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

RandomBatches random_batches(const model::ModelSpec& s, int count, int tokens, uint64_t seed) {
  Rng rng(seed);
  RandomBatches d;
  for (int i = 0; i < count; ++i) {
    std::vector<int> in(tokens), tg(tokens);
    for (int k = 0; k < tokens; ++k) {
      in[k] = static_cast<int>(rng.below(s.vocab_size));
      tg[k] = static_cast<int>(rng.below(s.vocab_size));
      if (s.architecture == model::Architecture::kBert && rng.uniform() < 0.6f) tg[k] = -1;
    }
    d.inputs.push_back(in);
    d.targets.push_back(tg);
  }
  return d;
}

void expect_run_usage_errors(const std::vector<std::vector<std::string>>& flag_lists) {
  for (const auto& flags : flag_lists) {
    const auto r = run_cann(RunArgs().steps(2).quiet().flags(flags), 60);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
  }
}

void expect_one_line_error(const CommandResult& r, int exit_code,
                           const std::vector<std::string>& parts, const std::string& prefix) {
  ASSERT_FALSE(r.timed_out) << "hung";
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  for (const auto& p : parts)
    EXPECT_NE(r.output.find(p), std::string::npos) << p << "\n" << r.output;
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  EXPECT_EQ(out.find('\n'), std::string::npos) << "more than one line:\n" << r.output;
  EXPECT_EQ(out.rfind(prefix, 0), 0u) << r.output;
}

double expect_tensors_close(const model::ParamTable& table, const std::vector<float>& ref,
                            const std::vector<float>& got, double tol, const std::string& what) {
  double worst = 0;
  for (const auto& t : table.tensors()) {
    float sc = 1e-12f;
    double dev = 0;
    for (size_t k = 0; k < t.numel; ++k) sc = std::max(sc, std::abs(ref[t.offset + k]));
    for (size_t k = 0; k < t.numel; ++k)
      dev = std::max(dev, static_cast<double>(std::abs(got[t.offset + k] - ref[t.offset + k])));
    EXPECT_LT(dev / sc, tol) << what << " " << t.name;
    worst = std::max(worst, dev / sc);
  }
  return worst;
}

std::string line_with(const std::string& out, const std::string& start) {
  const size_t at = out.find(start);
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

}  // namespace cann::test

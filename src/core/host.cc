// This machine's name and description (see host.h).
#include "core/host.h"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace cann {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The checkout's short commit: the binary lives in <checkout>/<build dir>/.
std::string checkout_commit() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  exe[n] = '\0';
  std::string checkout = exe;
  for (int up = 0; up < 2; ++up) checkout = checkout.substr(0, checkout.find_last_of('/'));
  std::FILE* p =
      ::popen(("git -C '" + checkout + "' rev-parse --short HEAD 2>/dev/null").c_str(), "r");
  if (p == nullptr) return "";
  char line[64] = {};
  const bool got = std::fgets(line, sizeof(line), p) != nullptr;
  ::pclose(p);
  return got ? trim(line) : "";
}

}  // namespace

const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return std::string("localhost");
    return std::string(buf);
  }();
  return name;
}

std::string machine_description() {
  std::string cpu = "unknown processor", family = "?", model = "?";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "model name" && cpu == "unknown processor") cpu = value;
    if (key == "cpu family" && family == "?") family = value;
    if (key == "model" && model == "?") model = value;
  }
  double mem_gib = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemTotal:", 0) == 0) mem_gib = std::atof(line.c_str() + 9) / 1048576.0;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  struct utsname u {};
  const std::string kernel = ::uname(&u) == 0 ? u.release : "unknown";
  const std::string commit = checkout_commit();
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%s (family %s model %s), %d cores, %.0f GiB, Linux %s%s%s",
                cpu.c_str(), family.c_str(), model.c_str(), cores, std::round(mem_gib),
                kernel.c_str(), commit.empty() ? "" : ", commit ", commit.c_str());
  return buf;
}

}  // namespace cann

// Reading the kernel's NIC error counters (see nic_counters.h).
#include "monitor/nic_counters.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace cann::monitor {
namespace {

namespace fs = std::filesystem;

const char* const kNetCounters[] = {"rx_errors", "tx_errors", "rx_dropped", "tx_dropped"};
const char* const kInfinibandCounters[] = {"symbol_error",
                                           "port_rcv_errors",
                                           "link_downed",
                                           "link_error_recovery",
                                           "port_xmit_discards",
                                           "port_rcv_remote_physical_errors",
                                           "local_link_integrity_errors",
                                           "excessive_buffer_overrun_errors"};

// The names in `dir`, sorted (so the exposition's order is stable); none when it is absent.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void add_counter(std::vector<NicCounter>& out, const std::string& device, const char* name,
                 const fs::path& file) {
  std::ifstream in(file);
  long long v = 0;
  if (in >> v && v >= 0) out.push_back({device, name, static_cast<int64_t>(v)});
}

}  // namespace

std::vector<NicCounter> read_nic_counters(const std::string& sys_root) {
  std::vector<NicCounter> out;
  const fs::path net = fs::path(sys_root) / "class/net";
  for (const std::string& dev : entries(net))
    for (const char* name : kNetCounters)
      add_counter(out, dev, name, net / dev / "statistics" / name);
  const fs::path ib = fs::path(sys_root) / "class/infiniband";
  for (const std::string& dev : entries(ib))
    for (const std::string& port : entries(ib / dev / "ports"))
      for (const char* name : kInfinibandCounters)
        add_counter(out, dev + "/" + port, name, ib / dev / "ports" / port / "counters" / name);
  return out;
}

}  // namespace cann::monitor

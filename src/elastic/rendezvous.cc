// Ticket-based node rendezvous and route-based address discovery.
#include "elastic/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

namespace cann::elastic {

StatusOr<NodeAssignment> join_nodes(comm::Store& store, const std::string& job, int nnodes,
                                    double timeout_s) {
  CANN_ASSIGN_OR_RETURN(int64_t ticket, store.add("cann/" + job + "/arrivals", 1));
  NodeAssignment a;
  a.node_rank = static_cast<int>((ticket - 1) % nnodes);
  a.round = static_cast<int>((ticket - 1) / nnodes);
  a.job_prefix = job + "/round" + std::to_string(a.round);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string base = "cann/" + a.job_prefix + "/node/";
  CANN_RETURN_IF_ERROR(store.set(base + std::to_string(a.node_rank), host));
  std::vector<std::string> keys;
  for (int n = 0; n < nnodes; ++n) keys.push_back(base + std::to_string(n));
  Status s = store.wait(keys, std::chrono::milliseconds(static_cast<long>(timeout_s * 1000)));
  if (!s.ok()) {
    int joined = 0;
    for (const auto& k : keys) {
      auto v = store.try_get(k);
      joined += v.ok() && v->has_value();
    }
    return IoError("rendezvous of job '" + job + "' at " + store.address() + ": " +
                   std::to_string(joined) + " of " + std::to_string(nnodes) +
                   " nodes joined within " + std::to_string(static_cast<int>(timeout_s)) +
                   " s; hint: start `cann-train run` with the same --rdzv, --rdzv-id and "
                   "--nnodes on every node");
  }
  return a;
}

std::string local_address_towards(const std::string& store_url) {
  const std::string scheme = "redis://";
  if (store_url.rfind(scheme, 0) != 0) return "127.0.0.1";
  std::string rest = store_url.substr(scheme.size());
  if (auto at = rest.rfind('@'); at != std::string::npos) rest = rest.substr(at + 1);
  if (auto slash = rest.find('/'); slash != std::string::npos) rest = rest.substr(0, slash);
  std::string host = rest, port = "6379";
  if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr)
    return "127.0.0.1";
  std::string result = "127.0.0.1";
  // A UDP connect sends nothing; it only asks the kernel which source address the route uses.
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) != nullptr)
      result = buf;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return result;
}

namespace {

// "ok", the processes per node, the global batch, the layout of each node count
// ("N:STRATEGY" joined by '|', empty when none), then the arguments; or "error" and the
// message. Fields are separated by the unit separator, which no argument holds.
constexpr char kSep = '\x1f';

std::string launch_record(const StatusOr<AgentConfig::NodeLaunch>& launch) {
  if (!launch.ok()) return "error" + std::string(1, kSep) + launch.status().message();
  std::string layouts;
  for (const auto& [nodes, strategy] : launch->node_layouts) {
    if (!layouts.empty()) layouts += '|';
    layouts += std::to_string(nodes);
    layouts += ':';
    layouts += strategy;
  }
  std::string value = "ok" + std::string(1, kSep) + std::to_string(launch->nproc_per_node) + kSep +
                      std::to_string(launch->global_batch) + kSep + layouts;
  for (const std::string& a : launch->worker_args) value += kSep + a;
  return value;
}

StatusOr<AgentConfig::NodeLaunch> parse_launch_record(const std::string& value,
                                                      const std::string& key) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t sep = value.find(kSep, start);
    parts.push_back(
        value.substr(start, sep == std::string::npos ? std::string::npos : sep - start));
    if (sep == std::string::npos) break;
    start = sep + 1;
  }
  if (parts[0] == "error" && parts.size() == 2)
    return FailedPrecondition("node 0 could not choose what to launch: " + parts[1]);
  AgentConfig::NodeLaunch launch;
  if (parts[0] != "ok" || parts.size() < 4 ||
      (launch.nproc_per_node = std::atoi(parts[1].c_str())) < 1)
    return Internal("node 0's launch record under " + key + " is malformed");
  launch.global_batch = std::atoi(parts[2].c_str());
  for (size_t at = 0; at < parts[3].size();) {
    size_t end = parts[3].find('|', at);
    if (end == std::string::npos) end = parts[3].size();
    const std::string entry = parts[3].substr(at, end - at);
    const size_t colon = entry.find(':');
    if (colon == std::string::npos)
      return Internal("node 0's launch record under " + key + " is malformed");
    launch.node_layouts[std::atoi(entry.c_str())] = entry.substr(colon + 1);
    at = end + 1;
  }
  launch.worker_args.assign(parts.begin() + 4, parts.end());
  return launch;
}

}  // namespace

StatusOr<AgentConfig::NodeLaunch> agree_on_launch(
    comm::Store& store, const std::string& key, bool decides,
    const std::function<StatusOr<AgentConfig::NodeLaunch>()>& decide, double timeout_s) {
  if (decides) {
    // An agent started again (the same node id) takes the record it wrote before.
    CANN_ASSIGN_OR_RETURN(std::optional<std::string> have, store.try_get(key));
    if (!have) {
      StatusOr<AgentConfig::NodeLaunch> mine = decide();
      const std::string record = launch_record(mine);
      CANN_ASSIGN_OR_RETURN(std::string stored, store.compare_set(key, std::nullopt, record));
      if (stored == record) return mine;  // this node's own error, as it met it
      have = std::move(stored);
    }
    return parse_launch_record(*have, key);
  }
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<long>(std::max(0.0, timeout_s) * 1000));
  while (true) {
    StatusOr<std::optional<std::string>> value = store.try_get(key);
    if (value.ok() && value->has_value()) return parse_launch_record(**value, key);
    if (std::chrono::steady_clock::now() >= deadline)
      return IoError("node 0 did not say what to launch within " +
                     std::to_string(static_cast<int>(timeout_s)) +
                     " s; hint: check node 0's output (it plans the layout)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace cann::elastic

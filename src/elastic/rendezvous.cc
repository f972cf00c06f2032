// Ticket-based node rendezvous and route-based address discovery.
#include "elastic/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
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

}  // namespace cann::elastic

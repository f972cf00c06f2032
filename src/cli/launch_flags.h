// The flags a command that launches workers on several nodes shares with `run` (`bench tune`):
// where the nodes' agents meet and the address this node's workers listen on.
#pragma once

#include <string>

namespace CLI {
class App;
}
namespace cann::elastic {
struct AgentConfig;
}

namespace cann::cli {

struct RendezvousFlags {
  std::string rdzv;
  std::string rdzv_id;
  double rdzv_timeout_s = 300.0;
  std::string comm_addr;
};

// --rdzv, --rdzv-id, --rdzv-timeout, --comm-addr; in option group `group` unless it is empty.
void add_rendezvous_flags(CLI::App* app, RendezvousFlags* flags, const std::string& group);

// The agent's rendezvous fields from the flags.
void apply_rendezvous_flags(const RendezvousFlags& flags, elastic::AgentConfig* agent);

}  // namespace cann::cli

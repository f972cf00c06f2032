// The rendezvous flags of the launching commands.
#include "cli/launch_flags.h"

#include <CLI/CLI.hpp>

#include "cli/validators.h"
#include "elastic/agent.h"

namespace cann::cli {

void add_rendezvous_flags(CLI::App* app, RendezvousFlags* flags, const std::string& group) {
  CLI::Option* options[] = {
      app->add_option("--rdzv", flags->rdzv,
                      "Rendezvous store shared by the nodes: redis://[:PASSWORD@]HOST:PORT"),
      app->add_option("--rdzv-id", flags->rdzv_id, "Job id; the same on every node"),
      app->add_option("--rdzv-timeout", flags->rdzv_timeout_s,
                      "Seconds to wait for all nodes to join")
          ->check(kPositive)
          ->capture_default_str(),
      app->add_option(
          "--comm-addr", flags->comm_addr,
          "Address this node's workers listen on (default: the one that routes to --rdzv)")};
  if (!group.empty())
    for (CLI::Option* o : options) o->group(group);
}

void apply_rendezvous_flags(const RendezvousFlags& flags, elastic::AgentConfig* agent) {
  agent->rdzv = flags.rdzv;
  agent->rdzv_id = flags.rdzv_id;
  agent->rdzv_timeout_s = flags.rdzv_timeout_s;
  agent->comm_addr = flags.comm_addr;
}

}  // namespace cann::cli

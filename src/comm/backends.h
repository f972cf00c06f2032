// Constructors of the Group backends, behind create_group(). Each is a collective over
// config.size ranks that rendezvous through config.store under config.prefix.
#pragma once

#include <memory>

#include "comm/group.h"

namespace cann::comm {

StatusOr<std::unique_ptr<Group>> make_gloo_group(const GroupConfig& config);
StatusOr<std::unique_ptr<Group>> make_shm_group(const GroupConfig& config);
StatusOr<std::unique_ptr<Group>> make_hierarchical_group(const GroupConfig& config);

// This machine's default host_id: hostname plus kernel boot id, so ranks on one host (and only
// those) agree on it.
std::string default_host_id();

}  // namespace cann::comm

// The shm backend's rendezvous, lifetime, failure record and sub-groups (see shm_group.h).
#include "comm/shm_group.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "comm/backends.h"

namespace cann::comm {

StatusOr<std::unique_ptr<Group>> make_shm_group(const GroupConfig& config) {
  CANN_ASSIGN_OR_RETURN(auto group, shm::ShmGroup::create(config));
  return std::unique_ptr<Group>(std::move(group));
}

}  // namespace cann::comm

namespace cann::comm::shm {

namespace {

// Beyond this the P x P mailbox rings dominate the segment (see mailbox_bytes_for).
constexpr int kMaxRanks = 128;

std::string key(const GroupConfig& c, const std::string& name) {
  return c.prefix + "/shm/" + name;
}

// Rings shrink as the world grows so that the P x P of them take about P x 2 MiB: 256 KiB each
// up to 8 ranks, 32 KiB at 64 ranks, 16 KiB (the floor) at 128.
size_t mailbox_bytes_for(int world) {
  const size_t share = std::bit_floor((size_t{2} << 20) / static_cast<size_t>(world));
  return std::clamp(share, size_t{16} << 10, kMailboxBytes);
}

uint64_t random_nonce() {
  std::random_device device;
  const uint64_t high = device();
  const uint64_t low = device();
  return (high << 32) ^ low ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

// Every rank publishes its host id and compares all of them, so every rank fails with the same
// message when one rank is elsewhere.
Status check_one_host(const GroupConfig& c) {
  if (c.host_id.empty())
    return InvalidArgument(
        "shm backend needs GroupConfig::host_id; hint: use create_group, which "
        "sets it to this machine's identity");
  CANN_RETURN_IF_ERROR(c.store->set(key(c, "host/" + std::to_string(c.rank)), c.host_id));
  std::string first;
  for (int q = 0; q < c.size; ++q) {
    auto host = c.store->get(key(c, "host/" + std::to_string(q)), c.timeout);
    if (!host.ok())
      return IoError("shm rendezvous: rank " + std::to_string(q) + " did not join within " +
                     std::to_string(c.timeout.count()) + " ms (" + host.status().message() + ")");
    if (q == 0) first = *host;
    if (*host != first)
      return InvalidArgument("shm backend needs all ranks on one host; rank " + std::to_string(q) +
                             " is on host " + *host + " but rank 0 is on host " + first +
                             "; hint: use the hierarchical backend (shm inside each host, gloo "
                             "between hosts) or gloo");
  }
  return OkStatus();
}

// Rank 0 creates the segment and publishes its nonce (or its error, so that the others fail at
// once instead of timing out); the others derive the name and open it.
StatusOr<std::unique_ptr<ShmSegment>> create_or_open(const GroupConfig& c,
                                                     const SegmentLayout& layout) {
  const std::string nonce_key = key(c, "nonce");
  if (c.rank == 0) {
    const uint64_t nonce = random_nonce();
    auto segment = ShmSegment::create(segment_name(c.prefix, nonce), layout);
    CANN_RETURN_IF_ERROR(c.store->set(
        nonce_key, segment.ok() ? std::to_string(nonce) : "error: " + segment.status().message()));
    return segment;
  }
  CANN_ASSIGN_OR_RETURN(const std::string value, c.store->get(nonce_key, c.timeout));
  if (value.rfind("error: ", 0) == 0)
    return FailedPrecondition("shm rendezvous: rank 0 could not create the segment: " +
                              value.substr(7));
  return ShmSegment::open(segment_name(c.prefix, std::strtoull(value.c_str(), nullptr, 10)),
                          layout);
}

}  // namespace

StatusOr<std::unique_ptr<ShmGroup>> ShmGroup::create(const GroupConfig& config) {
  if (!config.store) return InvalidArgument("shm backend needs a store for rendezvous");
  if (config.size < 1 || config.size > kMaxRanks || config.rank < 0 || config.rank >= config.size)
    return InvalidArgument("shm backend: rank " + std::to_string(config.rank) + " of " +
                           std::to_string(config.size) + " is invalid (1 to " +
                           std::to_string(kMaxRanks) + " ranks per host)");
  CANN_RETURN_IF_ERROR(check_one_host(config));
  const SegmentLayout layout =
      SegmentLayout::make(config.size, kSlotBytes, kPipelineDepth, mailbox_bytes_for(config.size));
  CANN_ASSIGN_OR_RETURN(auto segment, create_or_open(config, layout));

  ControlBlock& me = segment->control(config.rank);
  me.pid.store(static_cast<int32_t>(getpid()), std::memory_order_relaxed);
  me.pid_namespace.store(pid_namespace_id(), std::memory_order_relaxed);
  me.state.store(static_cast<uint32_t>(RankState::kActive), std::memory_order_release);
  CANN_RETURN_IF_ERROR(
      config.store->set(key(config, "attached/" + std::to_string(config.rank)), "1"));
  std::vector<std::string> attached;
  for (int q = 0; q < config.size; ++q)
    attached.push_back(key(config, "attached/" + std::to_string(q)));
  Status all_attached = config.store->wait(attached, config.timeout);
  // Every rank has the segment mapped (or the rendezvous failed): the name has done its job, and
  // removing it now means no crash from here on can leave it behind.
  if (config.rank == 0) {
    Status unlinked = segment->unlink();
    if (all_attached.ok()) all_attached = unlinked;
  }
  if (!all_attached.ok())
    return IoError("shm rendezvous: not every rank attached to the segment within " +
                   std::to_string(config.timeout.count()) + " ms (" + all_attached.message() + ")");
  return std::make_unique<ShmGroup>(config, std::move(segment));
}

ShmGroup::ShmGroup(const GroupConfig& config, std::unique_ptr<ShmSegment> segment)
    : AsyncGroup(config.rank, config.size, config.debug_checks),
      config_(config),
      segment_(std::move(segment)),
      peers_(*segment_),
      pipeline_(*segment_, peers_, config.rank),
      mailboxes_(*segment_, peers_, config.rank) {}

ShmGroup::~ShmGroup() {
  stop();  // no lane may run into the members below while they are destroyed
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (!aborted_)
    segment_->control(rank()).state.store(static_cast<uint32_t>(RankState::kClosed),
                                          std::memory_order_release);
}

Status ShmGroup::abort_with(Status s) {
  if (s.ok()) return s;
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (!aborted_) {
    aborted_ = true;
    ControlBlock& me = segment_->control(rank());
    std::snprintf(me.reason, sizeof(me.reason), "%s", s.message().c_str());
    me.state.store(static_cast<uint32_t>(RankState::kAborted), std::memory_order_release);
  }
  return s;
}

std::string ShmGroup::describe(const char* op, const Options& opts) const {
  std::string what = "shm " + std::string(op) + " #" + std::to_string(current_sequence());
  if (!opts.tag.empty()) what += " [" + opts.tag + "]";
  return what;
}

StatusOr<std::unique_ptr<Group>> ShmGroup::new_subgroup(const std::vector<int>& ranks,
                                                        const std::string& name) {
  if (name.empty()) return InvalidArgument("new_subgroup needs a name (a fresh key prefix)");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size() || (i > 0 && ranks[i] <= ranks[i - 1]))
      return InvalidArgument("new_subgroup '" + name + "': ranks must be ascending, distinct and " +
                             "in [0, " + std::to_string(size()) + ")");
  }
  const auto me = std::find(ranks.begin(), ranks.end(), rank());
  if (me == ranks.end()) return std::unique_ptr<Group>();
  GroupConfig sub = config_;
  sub.rank = static_cast<int>(me - ranks.begin());
  sub.size = static_cast<int>(ranks.size());
  sub.prefix = config_.prefix + "/sub/" + name;
  return make_shm_group(sub);
}

}  // namespace cann::comm::shm

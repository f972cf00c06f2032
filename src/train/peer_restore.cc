// State for a new multi-node elastic generation (the agent is elastic/node_agent.cc).
//
// A generation may change the world size, and the ranks of a node that just joined have no
// snapshot at all, so the state cannot be the agent's choice of per-rank files as on one node.
// Instead the ranks of the new group agree on it. A model-parallel generation's snapshots are
// parts of the state, each on two nodes, assembled by node_parts.cc; those of a data-parallel
// generation hold the whole state, and the newest of either kind serves. For the whole state:
//   1. each rank finds the newest snapshot of its node that verifies (every generation's copies
//      live under the node's root, ckpt::list_node_snapshots); the oldest of these over the
//      ranks that have one is the step S to load (as on one node: the committed step). Any copy
//      of S serves: it was written after step S's collectives, so every rank finished S, and it
//      holds the whole state (parameters, full AdamW moments, error-feedback buffers, sampler,
//      RNG), loadable at another world size by slicing;
//   2. ranks that hold S load their copy; when some rank does not, the lowest rank that holds S
//      broadcasts the files of its copy and the others write them as a snapshot of their own
//      (so a later failure finds it on this node too);
//   3. no copy anywhere (a failure before the first snapshot): the newest disk checkpoint, else
//      step 0, on every rank alike.
// A broadcast costs the snapshot's size (12 bytes per parameter and then some) once over the
// slowest link; it happens only when some node lacks the step (a node that joined).
#include <unistd.h>

#include <cstring>
#include <limits>

#include "ckpt/replicas.h"
#include "core/fs.h"
#include "core/log.h"
#include "train/state_keeper.h"

namespace cann::train {
namespace {

constexpr auto kWait = std::chrono::hours(24);  // collectives fail on their own comm timeout
// A copy's order: its step, then its generation (below this bound).
constexpr int64_t kGenerations = int64_t{1} << 20;
// Generations of parts looked at, newest first, before the disk checkpoint.
constexpr int kGenerationsTried = 4;

// A step directory's files as one blob: "<name>\0<size>\n" per file, a blank line, the bytes.
StatusOr<std::string> pack_copy(const std::string& step_dir) {
  CANN_ASSIGN_OR_RETURN(std::vector<std::string> names, list_dir(step_dir));
  std::string header, payload;
  for (const std::string& name : names) {
    CANN_ASSIGN_OR_RETURN(std::string bytes, read_file(join_path(step_dir, name)));
    header += name + '\0' + std::to_string(bytes.size()) + '\n';
    payload += bytes;
  }
  return header + '\n' + payload;
}

// Writes the blob's files into <dir>/<step_name> through a temporary directory and a rename,
// as the checkpoint writer does, so a partial copy never carries a final name.
StatusOr<std::string> unpack_copy(const std::string& blob, const std::string& dir,
                                  const std::string& step_name) {
  const size_t end = blob.find("\n\n");
  if (end == std::string::npos) return DataLoss("received snapshot has no file table");
  const std::string tmp = join_path(dir, "." + step_name + ".tmp-" + std::to_string(getpid()));
  (void)remove_all(tmp);
  CANN_RETURN_IF_ERROR(make_dirs(tmp));
  size_t pos = 0, data = end + 2;
  while (pos < end + 1) {
    const size_t nul = blob.find('\0', pos), nl = blob.find('\n', pos);
    if (nul == std::string::npos || nl == std::string::npos || nul > nl)
      return DataLoss("received snapshot has a malformed file table");
    const std::string name = blob.substr(pos, nul - pos);
    const size_t size = std::stoull(blob.substr(nul + 1, nl - nul - 1));
    if (data + size > blob.size()) return DataLoss("received snapshot is shorter than its table");
    CANN_RETURN_IF_ERROR(write_file_atomic(join_path(tmp, name), {blob.data() + data, size}));
    data += size;
    pos = nl + 1;
  }
  const std::string final_dir = join_path(dir, step_name);
  (void)remove_all(final_dir);
  if (std::rename(tmp.c_str(), final_dir.c_str()) != 0)
    return IoError(final_dir + ": cannot rename the received snapshot: " + errno_text());
  return final_dir;
}

}  // namespace

Status StateKeeper::world_max(int64_t* v, size_t n, const char* tag) {
  if (run_.world == nullptr) return OkStatus();
  comm::Options opts;
  opts.tag = tag;
  Status s =
      run_.world->allreduce(v, n, comm::DataType::kInt64, comm::ReduceOp::kMax, opts)->wait(kWait);
  return s.ok() ? s : run_.on_comm_failure(s);
}

Status StateKeeper::broadcast_blob(std::string& blob, int root, const char* tag) {
  comm::Group* world = run_.world;
  if (world == nullptr) return OkStatus();
  comm::Options opts;
  opts.tag = tag;
  int64_t size = static_cast<int64_t>(blob.size());
  Status s = world->broadcast(&size, 1, comm::DataType::kInt64, root, opts)->wait(kWait);
  if (!s.ok()) return run_.on_comm_failure(s);
  std::vector<int32_t> words((static_cast<size_t>(size) + 3) / 4, 0);
  if (!blob.empty()) std::memcpy(words.data(), blob.data(), blob.size());
  s = world->broadcast(words.data(), words.size(), comm::DataType::kInt32, root, opts)->wait(kWait);
  if (!s.ok()) return run_.on_comm_failure(s);
  blob.assign(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(size));
  return OkStatus();
}

StatusOr<int> StateKeeper::restore_from_peers() {
  comm::Group* world = run_.world;
  const int world_size = world ? world->size() : 1;
  // What the nodes hold, newest first: copies of the whole state (data-parallel generations)
  // or parts of a model-parallel generation (node_parts.cc); the newer kind serves.
  const std::vector<NodeCopy> all = node_copies();
  auto key = [](const NodeCopy& c) { return c.step * kGenerations + std::max(c.generation, 0); };
  int64_t newest[2] = {-1, -1};  // [parts, whole]
  for (const NodeCopy& c : all) {
    int64_t& k = newest[c.rank >= 0 ? 0 : 1];
    k = std::max(k, key(c));
  }
  CANN_RETURN_IF_ERROR(world_max(newest, 2, "restore_kind"));
  if (newest[0] > newest[1]) {
    // A generation whose parts are incomplete (a node and the next lost, or a generation that
    // failed while writing its first parts) yields to the one before.
    int64_t below = std::numeric_limits<int64_t>::max();
    for (int attempt = 0; attempt < kGenerationsTried; ++attempt) {
      int64_t gen = -1;
      for (const NodeCopy& c : all)
        if (c.rank >= 0 && c.generation < below) gen = std::max<int64_t>(gen, c.generation);
      CANN_RETURN_IF_ERROR(world_max(&gen, 1, "restore_generation"));
      if (gen < 0) break;
      CANN_ASSIGN_OR_RETURN(const int step, restore_node_parts(all, static_cast<int>(gen)));
      if (step >= 0) return step;
      below = gen;
    }
    return restore_from_disk_or_start();
  }
  if (newest[1] < 0) return restore_from_disk_or_start();
  // This node's newest copy of the whole state that verifies: what this rank offers.
  std::vector<ckpt::SnapshotCopy> copies;
  for (const NodeCopy& c : all)
    if (c.rank < 0) copies.push_back({c.step, c.path, c.generation});
  int64_t newest_step = -1;
  std::optional<ckpt::LoadedCheckpoint> local;
  std::string local_dir;
  for (const ckpt::SnapshotCopy& c : copies) {
    StatusOr<ckpt::LoadedCheckpoint> ck = ckpt::read_checkpoint(c.path);
    if (ck.ok()) {
      newest_step = c.step;
      local = std::move(*ck);
      local_dir = c.path;
      break;
    }
    log_warning("rank " + std::to_string(rank_) + ": snapshot " + c.path +
                " unusable, trying an older copy: " + ck.status().message());
  }
  // The step: the oldest of the ranks' newest (-newest maximized; ranks without any snapshot,
  // a node that just joined, offer nothing). Every rank finished it, and a node whose newest is
  // one interval ahead still holds it, so at most one snapshot interval is trained again and
  // the step log stays complete.
  int64_t offer = newest_step >= 0 ? -newest_step : std::numeric_limits<int64_t>::min();
  CANN_RETURN_IF_ERROR(world_max(&offer, 1, "restore_step"));
  if (offer == std::numeric_limits<int64_t>::min()) return restore_from_disk_or_start();
  const int64_t step = -offer;
  if (local && local->step != step) local.reset();
  for (const ckpt::SnapshotCopy& c : copies) {
    if (local || c.step != step) continue;
    StatusOr<ckpt::LoadedCheckpoint> ck = ckpt::read_checkpoint(c.path);
    if (!ck.ok()) continue;
    local = std::move(*ck);
    local_dir = c.path;
    break;
  }
  const bool have = local.has_value();
  // [the lowest rank holding the step, as world - rank; whether some rank lacks it]
  int64_t who[2] = {have ? world_size - rank_ : 0, have ? 0 : 1};
  CANN_RETURN_IF_ERROR(world_max(who, 2, "restore_source"));
  const int source = world_size - static_cast<int>(who[0]);
  std::string from = local_dir + " (this node's copy)";
  if (who[1] > 0) {
    std::string blob;
    if (rank_ == source) {
      CANN_ASSIGN_OR_RETURN(blob, pack_copy(local_dir));
    }
    CANN_RETURN_IF_ERROR(broadcast_blob(blob, source, "restore_snapshot"));
    if (!have) {
      char name[32];
      std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
      const std::string dir = join_path(snapshot_root_, "rank" + std::to_string(rank_));
      CANN_RETURN_IF_ERROR(make_dirs(dir));
      CANN_ASSIGN_OR_RETURN(const std::string path, unpack_copy(blob, dir, name));
      CANN_ASSIGN_OR_RETURN(ckpt::LoadedCheckpoint ck, ckpt::read_checkpoint(path));
      local = std::move(ck);
      from = path + " (received from rank " + std::to_string(source) + ", " +
             std::to_string(blob.size()) + " bytes)";
      log_info("rank " + std::to_string(rank_) + " received the snapshot of step " +
               std::to_string(step) + " from rank " + std::to_string(source) + " (" +
               std::to_string(blob.size()) + " bytes)");
    }
  }
  CANN_ASSIGN_OR_RETURN(const int restored, restore(*local));
  event("state_restored", "step " + std::to_string(restored) + " from " + from + ", world size " +
                              std::to_string(world_size));
  return restored;
}

}  // namespace cann::train

// Which in-memory snapshot each rank of a restarted elastic generation loads.
//
// Every rank r keeps the last two snapshots of the run state in <root>/rank<r>/ (checkpoint
// format, in a memory file system; each snapshot holds the whole state, so any rank's copy can
// restore any rank). A step is committed when every rank finished it; a rank writes its
// snapshot of step k only after the collectives of step k, so the ranks' newest snapshots differ
// by at most one snapshot interval, and the committed step is the smallest newest step. Keeping
// two per rank means that step is still present at ranks that already wrote the next one.
//
// Example, 3 ranks, snapshot every step: rank 0 holds {7, 8}, rank 1 {6, 7} (killed during
// step 8), rank 2 {7, 8}. Committed step: 7. Rank 1 loads rank1/step-7, or rank2/step-7 (its
// neighbour) if its own is damaged, or any other rank's step-7.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cann::ckpt {

struct ReplicaPlan {
  int64_t step = -1;  // the committed step; -1: no snapshot anywhere (use disk checkpoints)
  // Per rank, the step directories to try in order, joined with ';'.
  std::vector<std::string> candidates;
};

// Looks at the directories only (verification is the loader's: read_checkpoint); never fails:
// a missing or unreadable directory counts as a rank with no snapshot.
ReplicaPlan plan_replica_restore(const std::string& root, int world_size);

// Across nodes (the multi-node elastic agent) ranks change from one generation to the next, so
// a node keeps its snapshots as <root>/gen<G>/rank<r>/step-<k>/ and any of them may serve: a
// snapshot of step k is written after the collectives of step k, so every rank finished step k,
// and each holds the whole state. The node's copies, newest step first.
struct SnapshotCopy {
  int64_t step = 0;
  std::string path;
};
std::vector<SnapshotCopy> list_node_snapshots(const std::string& root);
// Removes every copy of all but the `keep_steps` newest steps under root (a generation's
// directories stay while they hold a kept copy). Called between generations, no writer running.
void prune_node_snapshots(const std::string& root, int keep_steps);

}  // namespace cann::ckpt

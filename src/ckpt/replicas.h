// Which in-memory snapshot each rank of a restarted elastic generation loads.
//
// Every rank r keeps the last two snapshots of the run state in <root>/rank<r>/ (checkpoint
// format, in a memory file system; each snapshot holds the whole state, so any rank's copy can
// restore any rank). A rank writes its snapshot of step k only after the collectives of step
// k, so once any rank wrote step k every rank's gradients of step k were reduced, and that
// rank's copy is the whole state after step k: the committed step is the newest step any rank
// wrote, and a rank without a copy of it loads a neighbour's.
//
// Example, 3 ranks, snapshot every step: rank 0 holds {7, 8}, rank 1 {6, 7} (killed during
// step 8, before its snapshot), rank 2 {7, 8}. Committed step: 8. Rank 1 loads rank2/step-8
// (its neighbour), else rank0/step-8; ranks 0 and 2 load their own, else the other's. Should
// no copy of step 8 verify, every rank goes on to step 7's copies (own first, then ring order),
// then to step 6's: each tries the same files step by step, so all land on the same step, and
// the trainer checks that they did.
//
// Under model parallelism a snapshot holds only its rank's part of the state (its shards, stage
// or experts, its optimizer moments and residuals) in its own layout, and its metadata says so
// (a RankSnapshotMark). Then no copy serves another rank: each rank is offered its own copy of
// the committed step only, and when any rank lacks one, or a copy is marked with another rank
// or layout, the plan names no step and every rank loads the newest disk checkpoint (the whole
// model, gathered), so that all ranks still agree on the step. Example, tp=2: rank 0 holds
// {7, 8}, rank 1 {7} (its step-6 pruned, killed during step 8): committed step 7 (the
// smallest newest step: each rank needs its own copy), rank 0 loads rank0/step-7, rank 1
// rank1/step-7 and nothing else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cann::ckpt {

// Whose state a model-parallel snapshot holds: the layout (the strategy string) and the rank.
// Kept in the checkpoint metadata under "rank_snapshot".
struct RankSnapshotMark {
  std::string layout;
  int rank = -1;
  bool operator==(const RankSnapshotMark&) const = default;
};
// The mark of a checkpoint's metadata (a JSON object); nullopt when it has none (a snapshot or
// checkpoint of the whole state) or the metadata does not parse.
std::optional<RankSnapshotMark> rank_snapshot_mark(const std::string& meta_json);
// meta_json (a JSON object) with `mark` added.
std::string with_rank_snapshot_mark(const std::string& meta_json, const RankSnapshotMark& mark);
// meta_json (a JSON object) without its mark.
std::string without_rank_snapshot_mark(const std::string& meta_json);

// The step of a snapshot directory "<...>/step-00000007" (7); -1 for any other name.
int64_t snapshot_step(const std::string& step_dir);

struct ReplicaPlan {
  int64_t step = -1;  // the committed step; -1: no snapshot anywhere (use disk checkpoints)
  // Per rank, the step directories to try in order, joined with ';': whole-state copies list
  // the committed step's copies, then those of the older steps kept (a fallback when memory
  // damage spoils every copy of the newest); model-parallel ones the rank's own copy only.
  std::vector<std::string> candidates;
  // Why no snapshot serves (step -1 although snapshots exist); empty otherwise.
  std::string note;
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
  int generation = -1;  // G of its gen<G> directory
};
std::vector<SnapshotCopy> list_node_snapshots(const std::string& root);
// Removes every copy of all but the `keep_steps` newest steps under root (a generation's
// directories stay while they hold a kept copy). Called between generations, no writer running.
void prune_node_snapshots(const std::string& root, int keep_steps);

}  // namespace cann::ckpt

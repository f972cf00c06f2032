// A recommendation run's checkpoints: the workers' dense state (parameters and Adam moments,
// the same on every worker) in dir/dense-NNNNNNNN.bin, the rows on each shard (ps_shard.h's
// save), and dir/committed naming the last step whose every part is on disk. A run resumes from
// the committed step: parts of a later step (a crash between the shards' files and the commit)
// are ignored, so nothing committed is lost and nothing half-written is read.
#pragma once

#include <string>

#include "core/status.h"

namespace cann::recsys {

// The dense state of `step`: params, Adam's m and v (n floats each).
Status save_dense(const std::string& dir, int step, const float* params, const float* m,
                  const float* v, int64_t n);
Status load_dense(const std::string& dir, int step, float* params, float* m, float* v, int64_t n);
// Marks `step` committed (atomically) and removes the dense files of older steps.
Status commit_step(const std::string& dir, int step);
// The committed step; 0 when the directory holds none.
StatusOr<int> committed_step(const std::string& dir);

}  // namespace cann::recsys

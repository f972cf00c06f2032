// Hugging Face weights in and out: `run --init-from DIR` reads DIR/config.json and the
// safetensors in DIR (one file, or shards behind model.safetensors.index.json) into the
// single-process parameter layout, from which each rank takes its part (tensor-parallel shard,
// pipeline stage, expert block) with slice_from_full, so a checkpoint loads under any layout;
// `run --export-hf DIR` writes the trained model back as config.json plus F32 safetensors
// (sharded past kHfShardBytes, with the index) that load back bit for bit.
//
// Loading checks everything before anything is written (every tensor present, none extra,
// each shape the config implies, each dtype readable: F32, BF16, F16), then reads one tensor at
// a time, so no more than one tensor's bytes are held besides the parameters. A failure is one
// line naming the tensor and the file, exit 1 (DataLoss).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/spec.h"

namespace cann::train {

// Shards of at most 2 GiB, a size every safetensors reader handles.
constexpr uint64_t kHfShardBytes = 2ull << 30;

// DIR/config.json as a spec (named after the directory).
StatusOr<model::ModelSpec> hf_dir_spec(const std::string& dir);
// OK when `given` (from --model) and DIR's config describe the same model; otherwise the one
// line names the first key where they differ.
Status check_same_model(const model::ModelSpec& given, const model::ModelSpec& in_dir,
                        const std::string& dir);

// full <- DIR's weights in build_param_table(spec)'s layout (total_floats() floats; padding
// left as it is). `full` is written only when every check passed.
Status load_hf_weights(const model::ModelSpec& spec, const std::string& dir,
                       std::vector<float>* full);
// Writes config.json and the weights of `full` (build_param_table(spec)'s layout) into dir.
Status export_hf(const model::ModelSpec& spec, const float* full, const std::string& dir,
                 uint64_t max_shard_bytes = kHfShardBytes);

}  // namespace cann::train

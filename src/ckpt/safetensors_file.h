// Safetensors files as Hugging Face publishes them, read lazily: the header is parsed once
// (names, dtypes, shapes, byte ranges) and each tensor's bytes are read from the file only when
// asked for, converted to float32. F32, BF16 and F16 are read; other dtypes are listed in the
// header (so a loader can name them) but refused when read. A model's weights are one file or
// several shards behind `model.safetensors.index.json` (weight_map: tensor -> file); WeightDir
// opens either and knows which file holds each tensor without holding any tensor data.
//
// Writing: write_weight_shards cuts a list of float32 tensors into shards of at most
// `max_shard_bytes` (one shard's bytes in memory at a time) and writes the index when there is
// more than one, with the file names transformers uses (model-00001-of-00003.safetensors).
// Depends on core only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::ckpt {

struct TensorEntry {
  std::string name;
  std::string dtype;  // as the header spells it: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // bytes from the start of the data section
  size_t file = 0;              // index into WeightDir::files (0 for a lone file)
  uint64_t numel() const;
};

struct SafetensorsHeader {
  std::string path;
  uint64_t data_start = 0;  // 8 + header length
  std::vector<TensorEntry> tensors;
  std::map<std::string, std::string> metadata;
};

// The header's JSON text of a file whose data section holds data_size bytes; errors are the bare
// reason (the caller names the file). Checks every tensor's byte range against its shape and
// dtype and against data_size. Tensors come in data order.
StatusOr<SafetensorsHeader> parse_safetensors_header(const std::string& text, uint64_t data_size);
// Bytes per element of a dtype this reader converts (F32 4, BF16 2, F16 2), 0 otherwise.
int readable_dtype_size(const std::string& dtype);
// Parses the header of `path` and checks every byte range against the file's size, without
// reading tensor data. A range past the end names the tensor and says the file is truncated.
StatusOr<SafetensorsHeader> read_safetensors_header(const std::string& path);
// Reads entry `e` of the file at `path` (data section at data_start) into out (numel floats).
Status read_tensor_f32(const std::string& path, uint64_t data_start, const TensorEntry& e,
                       float* out);

// The weights of a model directory: model.safetensors.index.json if present, else every
// *.safetensors file in it (sorted).
struct WeightDir {
  std::string dir;
  std::vector<SafetensorsHeader> files;
  std::map<std::string, TensorEntry> tensors;  // by name, each with its file index
  StatusOr<std::vector<float>> read(const std::string& name) const;
  std::string file_of(const std::string& name) const;
};
StatusOr<WeightDir> open_weight_dir(const std::string& dir);

// One tensor to write: its name, shape, and a function filling its product(shape) floats.
struct TensorSource {
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(float*)> fill;
};
// Writes `tensors` in order into dir as model.safetensors, or when their bytes exceed
// max_shard_bytes as model-0000i-of-0000n.safetensors plus model.safetensors.index.json. Every
// file carries the metadata {"format": "pt"} as transformers writes; model*.safetensors files
// of an earlier export into dir are removed. Returns the file names.
StatusOr<std::vector<std::string>> write_weight_shards(const std::string& dir,
                                                       const std::vector<TensorSource>& tensors,
                                                       uint64_t max_shard_bytes);

}  // namespace cann::ckpt

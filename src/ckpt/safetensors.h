// The safetensors file format (Hugging Face's): an 8-byte little-endian header length, a JSON
// header mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end)} (bytes
// from the end of the header) plus an optional "__metadata__" map of strings, then the raw
// tensor bytes. `run --dump-grads` writes gradients in it, so that any tool (numpy, PyTorch's
// safetensors) reads them, and `debug grads` compares two dumps tensor by tensor.
//
// Only F32 tensors are written and read here. Depends on core only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::ckpt {

// The format caps the header at 100 MB; a larger one is a corrupt or foreign file.
inline constexpr uint64_t kMaxSafetensorsHeader = 100u << 20;

struct SafeTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, product(shape) elements
};

struct SafeTensors {
  std::vector<SafeTensor> tensors;  // in file order (by data offset)
  std::map<std::string, std::string> metadata;
  const SafeTensor* find(const std::string& name) const;
};

// The file's bytes; tensors keep their order. Fails (kInvalidArgument) on a shape that does
// not match the data or a repeated name.
StatusOr<std::string> encode_safetensors(const SafeTensors& st);
// Parses `bytes` (read from `path`, for messages): one-line errors name what is malformed.
StatusOr<SafeTensors> decode_safetensors(const std::string& bytes, const std::string& path);
StatusOr<SafeTensors> read_safetensors(const std::string& path);
Status write_safetensors(const std::string& path, const SafeTensors& st);

}  // namespace cann::ckpt

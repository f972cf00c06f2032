// Lazy safetensors reading, the weight directory and sharded writing (see safetensors_file.h).
#include "ckpt/safetensors_file.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/safetensors.h"
#include "core/fs.h"

namespace cann::ckpt {
namespace {

constexpr const char* kIndex = "model.safetensors.index.json";

// Bytes per element of every dtype the format defines; 0 for a name it does not.
int dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals, inf and NaN kept.
float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: man * 2^-24, exact in float
    float f = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

uint64_t TensorEntry::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

int readable_dtype_size(const std::string& dtype) {
  return dtype == "F32" ? 4 : dtype == "BF16" || dtype == "F16" ? 2 : 0;
}

StatusOr<SafetensorsHeader> parse_safetensors_header(const std::string& text, uint64_t data_size) {
  const auto header = nlohmann::json::parse(text, nullptr, false);
  if (header.is_discarded() || !header.is_object())
    return InvalidArgument("the header is not a JSON object");
  SafetensorsHeader out;
  out.data_start = 8 + text.size();
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return InvalidArgument("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) out.metadata[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
        !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
      return InvalidArgument("tensor " + it.key() + " lacks dtype, shape or data_offsets");
    TensorEntry t;
    t.name = it.key();
    t.dtype = e["dtype"].get<std::string>();
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return InvalidArgument("tensor " + t.name + " has a bad shape");
      t.shape.push_back(d.get<int64_t>());
    }
    if (!e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned())
      return InvalidArgument("tensor " + t.name + " has bad data_offsets");
    t.begin = e["data_offsets"][0];
    t.end = e["data_offsets"][1];
    const int size = dtype_size(t.dtype);
    if (size == 0) return InvalidArgument("tensor " + t.name + " has unknown dtype " + t.dtype);
    if (t.begin > t.end || t.end - t.begin != t.numel() * size)
      return InvalidArgument("tensor " + t.name + "'s data_offsets do not fit its shape");
    if (t.end > data_size)
      return InvalidArgument("tensor " + t.name +
                             "'s data_offsets do not fit the file: its data ends at byte " +
                             std::to_string(t.end) + " of a data section of " +
                             std::to_string(data_size) + " bytes (the file is truncated)");
    out.tensors.push_back(std::move(t));
  }
  std::stable_sort(out.tensors.begin(), out.tensors.end(),
                   [](const TensorEntry& x, const TensorEntry& y) { return x.begin < y.begin; });
  return out;
}

StatusOr<SafetensorsHeader> read_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return NotFound(path + ": cannot open (" + errno_text() + ")");
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  auto bad = [&](const std::string& what) {
    return DataLoss(path + ": not a readable safetensors file: " + what +
                    "; hint: re-download or re-export the checkpoint");
  };
  if (size < 8) return bad("shorter than its 8-byte header length");
  unsigned char len[8];
  in.seekg(0);
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > kMaxSafetensorsHeader || n > size - 8)
    return bad("header length " + std::to_string(n) + " past the end (the file is truncated)");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in) return bad("cannot read the header");
  auto h = parse_safetensors_header(text, size - 8 - n);
  if (!h.ok()) return bad(h.status().message());
  h->path = path;
  return h;
}

Status read_tensor_f32(const std::string& path, uint64_t data_start, const TensorEntry& e,
                       float* out) {
  const int size = readable_dtype_size(e.dtype);
  if (size == 0)
    return DataLoss("tensor " + e.name + " in " + path + " is " + e.dtype +
                    ", which cann-train does not read; hint: convert the checkpoint to "
                    "F32, BF16 or F16");
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes(e.end - e.begin);
  in.seekg(static_cast<std::streamoff>(data_start + e.begin));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) return DataLoss(path + ": cannot read tensor " + e.name + " (" + errno_text() + ")");
  const uint64_t n = e.numel();
  if (size == 4) {
    std::memcpy(out, bytes.data(), n * 4);
    return OkStatus();
  }
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    out[i] = e.dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
  }
  return OkStatus();
}

StatusOr<std::vector<float>> WeightDir::read(const std::string& name) const {
  const TensorEntry& e = tensors.at(name);
  std::vector<float> out(e.numel());
  const SafetensorsHeader& f = files[e.file];
  CANN_RETURN_IF_ERROR(read_tensor_f32(f.path, f.data_start, e, out.data()));
  return out;
}

std::string WeightDir::file_of(const std::string& name) const {
  return files[tensors.at(name).file].path;
}

StatusOr<WeightDir> open_weight_dir(const std::string& dir) {
  WeightDir w;
  w.dir = dir;
  const std::string index = join_path(dir, kIndex);
  // file name -> the tensors the index says it holds
  std::map<std::string, std::vector<std::string>> listed;
  if (path_exists(index)) {
    CANN_ASSIGN_OR_RETURN(const std::string text, read_file(index));
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object())
      return DataLoss(index +
                      ": not a safetensors index (no weight_map object); hint: "
                      "re-download or re-export the checkpoint");
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string())
        return DataLoss(index + ": weight_map entry " + it.key() + " is not a file name");
      listed[it->get<std::string>()].push_back(it.key());
    }
  } else {
    CANN_ASSIGN_OR_RETURN(const auto names, list_dir(dir));
    for (const std::string& n : names)
      if (n.ends_with(".safetensors")) listed[n];
    if (listed.empty())
      return NotFound(dir + ": no *.safetensors file and no " + kIndex +
                      "; hint: pass a directory written by `run --export-hf` or downloaded from "
                      "the Hugging Face hub");
  }
  for (const auto& [file, names] : listed) {
    const std::string path = join_path(dir, file);
    if (!path_exists(path))
      return DataLoss(index + " names " + file + " for tensor " + names.front() +
                      ", which is missing; hint: download every shard the index lists");
    CANN_ASSIGN_OR_RETURN(SafetensorsHeader h, read_safetensors_header(path));
    const size_t fi = w.files.size();
    std::set<std::string> in_file;
    for (TensorEntry e : h.tensors) {
      in_file.insert(e.name);
      e.file = fi;
      if (w.tensors.count(e.name))
        return DataLoss("tensor " + e.name + " is in both " + w.file_of(e.name) + " and " + path +
                        "; hint: keep one copy of each tensor");
      w.tensors.emplace(e.name, std::move(e));
    }
    for (const std::string& n : names)
      if (!in_file.count(n))
        return DataLoss(index + " places tensor " + n + " in " + path +
                        ", whose header lacks it; hint: re-download that shard");
    w.files.push_back(std::move(h));
  }
  return w;
}

StatusOr<std::vector<std::string>> write_weight_shards(const std::string& dir,
                                                       const std::vector<TensorSource>& tensors,
                                                       uint64_t max_shard_bytes) {
  // Cut the list into shards: a new one starts when the next tensor would overflow this one.
  std::vector<std::pair<size_t, size_t>> cuts;  // [begin, end) into tensors
  uint64_t bytes = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t b = 4;
    for (int64_t d : tensors[i].shape) b *= static_cast<uint64_t>(d);
    if (cuts.empty() || (bytes > 0 && bytes + b > max_shard_bytes)) {
      cuts.push_back({i, i});
      bytes = 0;
    }
    cuts.back().second = i + 1;
    bytes += b;
    total += b;
  }
  if (cuts.empty()) cuts.push_back({0, 0});
  CANN_RETURN_IF_ERROR(make_dirs(dir));
  std::vector<std::string> names;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < cuts.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, cuts.size());
    names.push_back(cuts.size() == 1 ? "model.safetensors" : name);
    SafeTensors st;  // one shard's data at a time
    st.metadata = {{"format", "pt"}};
    for (size_t i = cuts[s].first; i < cuts[s].second; ++i) {
      SafeTensor t{tensors[i].name, tensors[i].shape, {}};
      uint64_t n = 1;
      for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
      t.data.resize(n);
      tensors[i].fill(t.data.data());
      weight_map[t.name] = names.back();
      st.tensors.push_back(std::move(t));
    }
    CANN_RETURN_IF_ERROR(write_safetensors(join_path(dir, names.back()), st));
  }
  if (cuts.size() > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                    {"weight_map", weight_map}};
    CANN_RETURN_IF_ERROR(write_file_atomic(join_path(dir, kIndex), index.dump(2) + "\n"));
    names.push_back(kIndex);
  } else {
    CANN_RETURN_IF_ERROR(remove_all(join_path(dir, kIndex)));  // a stale one would mislead
  }
  // Weight files of an earlier export into the same directory would be read with these.
  CANN_ASSIGN_OR_RETURN(const std::vector<std::string> present, list_dir(dir));
  for (const std::string& n : present)
    if (n.starts_with("model") && n.ends_with(".safetensors") &&
        std::find(names.begin(), names.end(), n) == names.end())
      CANN_RETURN_IF_ERROR(remove_all(join_path(dir, n)));
  return names;
}

}  // namespace cann::ckpt

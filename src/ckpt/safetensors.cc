#include "ckpt/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/safetensors_file.h"
#include "core/fs.h"

namespace cann::ckpt {
namespace {

uint64_t product(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace

const SafeTensor* SafeTensors::find(const std::string& name) const {
  for (const SafeTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

StatusOr<std::string> encode_safetensors(const SafeTensors& st) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!st.metadata.empty()) header["__metadata__"] = st.metadata;
  std::set<std::string> names;
  uint64_t at = 0;
  for (const SafeTensor& t : st.tensors) {
    if (!names.insert(t.name).second)
      return InvalidArgument("safetensors: tensor " + t.name + " appears twice");
    if (product(t.shape) != t.data.size())
      return InvalidArgument("safetensors: tensor " + t.name + " has " +
                             std::to_string(t.data.size()) + " values for its shape");
    const uint64_t bytes = t.data.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  // The data that follows starts 8-byte aligned, as the reference writer pads it.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + at);
  for (const SafeTensor& t : st.tensors)
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
  return out;
}

StatusOr<SafeTensors> decode_safetensors(const std::string& bytes, const std::string& path) {
  auto bad = [&](const std::string& what) {
    return InvalidArgument(path + ": not a safetensors file of float32 tensors: " + what +
                           "; hint: pass a file written by `cann-train run --dump-grads`");
  };
  if (bytes.size() < 8) return bad("shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > kMaxSafetensorsHeader || n > bytes.size() - 8)
    return bad("header length " + std::to_string(n) + " past the end");
  auto header = parse_safetensors_header(bytes.substr(8, n), bytes.size() - 8 - n);
  if (!header.ok()) return bad(header.status().message());
  const char* data = bytes.data() + 8 + n;
  SafeTensors out;
  out.metadata = std::move(header->metadata);
  for (const TensorEntry& e : header->tensors) {  // in data order
    if (e.dtype != "F32") return bad("tensor " + e.name + " is " + e.dtype);
    SafeTensor t{e.name, e.shape, std::vector<float>(e.numel())};
    if (!t.data.empty()) std::memcpy(t.data.data(), data + e.begin, e.end - e.begin);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

StatusOr<SafeTensors> read_safetensors(const std::string& path) {
  CANN_ASSIGN_OR_RETURN(const std::string bytes, read_file(path));
  return decode_safetensors(bytes, path);
}

Status write_safetensors(const std::string& path, const SafeTensors& st) {
  CANN_ASSIGN_OR_RETURN(const std::string bytes, encode_safetensors(st));
  return write_file_atomic(path, bytes);
}

}  // namespace cann::ckpt

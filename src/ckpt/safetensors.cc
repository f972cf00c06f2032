#include "ckpt/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/fs.h"

namespace cann::ckpt {
namespace {

// The format caps the header at 100 MB; larger is a corrupt or foreign file.
constexpr uint64_t kMaxHeader = 100u << 20;

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
  if (n > kMaxHeader || n > bytes.size() - 8)
    return bad("header length " + std::to_string(n) + " past the end");
  const auto header = nlohmann::json::parse(bytes.substr(8, n), nullptr, false);
  if (header.is_discarded() || !header.is_object()) return bad("the header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;
  SafeTensors out;
  std::vector<std::pair<uint64_t, SafeTensor>> found;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return bad("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) out.metadata[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      return bad("tensor " + it.key() + " lacks dtype, shape or data_offsets");
    if (e["dtype"] != "F32") return bad("tensor " + it.key() + " is " + e["dtype"].dump());
    SafeTensor t;
    t.name = it.key();
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return bad("tensor " + t.name + " has a bad shape");
      t.shape.push_back(d.get<int64_t>());
    }
    if (!e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned())
      return bad("tensor " + t.name + " has bad data_offsets");
    const uint64_t b = e["data_offsets"][0], end = e["data_offsets"][1];
    if (b > end || end > data_size || end - b != product(t.shape) * sizeof(float))
      return bad("tensor " + t.name + "'s data_offsets do not fit its shape or the file");
    t.data.resize(product(t.shape));
    if (!t.data.empty()) std::memcpy(t.data.data(), data + b, end - b);
    found.emplace_back(b, std::move(t));
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  for (auto& f : found) out.tensors.push_back(std::move(f.second));
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

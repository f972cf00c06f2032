// An independent reader of TensorBoard event files for the tests, written from the formats'
// definitions rather than from the writer (monitor/tensorboard.h): its own CRC-32C (table built
// from RFC 3720's polynomial, checked against the RFC's test vectors) and its own protobuf
// field parser. Sharing code with the writer would let one misreading of the format pass on
// both sides.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace cann::test {

// ---- Independent reader ----------------------------------------------------------------------

inline uint32_t reverse_bits(uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}

// CRC-32C as RFC 3720 (iSCSI) defines it: generator polynomial 0x1EDC6F41, register preset to
// all ones, bits processed least significant first, result complemented. Processing LSB first
// is the reflected form, so the table is built from the bit-reversed polynomial.
class ReferenceCrc32c {
 public:
  ReferenceCrc32c() {
    const uint32_t poly = reverse_bits(0x1EDC6F41u);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? poly : 0u);
      table_[i] = c;
    }
  }
  uint32_t crc(std::string_view bytes) const {
    uint32_t c = 0xFFFFFFFFu;
    for (unsigned char b : bytes) c = table_[(c ^ b) & 0xFFu] ^ (c >> 8);
    return ~c;
  }
  uint32_t masked(std::string_view bytes) const {
    const uint32_t c = crc(bytes);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
  }

 private:
  uint32_t table_[256];
};

inline const ReferenceCrc32c& reference_crc() {
  static const ReferenceCrc32c crc;
  return crc;
}

inline uint64_t read_le(std::string_view bytes, size_t offset, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  return v;
}

// One protobuf field as it appears on the wire.
struct WireField {
  uint64_t number = 0;
  int wire_type = -1;
  uint64_t integer = 0;  // varint, fixed64 or fixed32 payload
  std::string bytes;     // length-delimited payload
};

inline bool read_varint(std::string_view msg, size_t& pos, uint64_t& out) {
  out = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= msg.size()) return false;
    const auto b = static_cast<unsigned char>(msg[pos++]);
    out |= static_cast<uint64_t>(b & 0x7Fu) << shift;
    if ((b & 0x80u) == 0) return true;
  }
  return false;  // more than ten bytes
}

inline std::optional<std::vector<WireField>> parse_message(std::string_view msg,
                                                           std::string& error) {
  std::vector<WireField> fields;
  size_t pos = 0;
  while (pos < msg.size()) {
    WireField f;
    uint64_t key = 0;
    if (!read_varint(msg, pos, key)) {
      error = "bad key varint at byte " + std::to_string(pos);
      return std::nullopt;
    }
    f.number = key >> 3;
    f.wire_type = static_cast<int>(key & 7u);
    if (f.number == 0) {
      error = "field number 0";
      return std::nullopt;
    }
    bool ok = true;
    switch (f.wire_type) {
      case 0:
        ok = read_varint(msg, pos, f.integer);
        break;
      case 1:
      case 5: {
        const size_t width = f.wire_type == 1 ? 8 : 4;
        ok = msg.size() - pos >= width;
        if (ok) f.integer = read_le(msg, pos, static_cast<int>(width));
        pos += ok ? width : 0;
        break;
      }
      case 2: {
        uint64_t length = 0;
        ok = read_varint(msg, pos, length) && length <= msg.size() - pos;
        if (ok) f.bytes = std::string(msg.substr(pos, length));
        pos += ok ? length : 0;
        break;
      }
      default:
        error = "unsupported wire type " + std::to_string(f.wire_type);
        return std::nullopt;
    }
    if (!ok) {
      error = "field " + std::to_string(f.number) + " runs past the end of the message";
      return std::nullopt;
    }
    fields.push_back(std::move(f));
  }
  return fields;
}

struct ScalarValue {
  std::string tag;
  float value = 0;
};

struct DecodedEvent {
  std::string data;  // the record's payload, for byte comparisons
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  bool has_summary = false;
  std::vector<ScalarValue> values;
};

inline bool expect_wire_type(const WireField& f, int type, const char* what, std::string& error) {
  if (f.wire_type == type) return true;
  error = std::string(what) + " has wire type " + std::to_string(f.wire_type);
  return false;
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5 }
// Summary { repeated Value value = 1 }; Value { string tag = 1; float simple_value = 2 }.
inline std::optional<DecodedEvent> decode_event(std::string_view data, std::string& error) {
  DecodedEvent e;
  e.data = std::string(data);
  auto fields = parse_message(data, error);
  if (!fields) return std::nullopt;
  for (const WireField& f : *fields) {
    if (f.number == 1) {
      if (!expect_wire_type(f, 1, "wall_time", error)) return std::nullopt;
      double d;
      std::memcpy(&d, &f.integer, 8);
      e.wall_time = d;
    } else if (f.number == 2) {
      if (!expect_wire_type(f, 0, "step", error)) return std::nullopt;
      e.step = static_cast<int64_t>(f.integer);
    } else if (f.number == 3) {
      if (!expect_wire_type(f, 2, "file_version", error)) return std::nullopt;
      e.file_version = f.bytes;
    } else if (f.number == 5) {
      if (!expect_wire_type(f, 2, "summary", error)) return std::nullopt;
      e.has_summary = true;
      auto summary = parse_message(f.bytes, error);
      if (!summary) return std::nullopt;
      for (const WireField& sv : *summary) {
        if (sv.number != 1 || !expect_wire_type(sv, 2, "Summary.value", error)) {
          if (error.empty()) error = "unexpected Summary field " + std::to_string(sv.number);
          return std::nullopt;
        }
        auto value_fields = parse_message(sv.bytes, error);
        if (!value_fields) return std::nullopt;
        ScalarValue v;
        bool has_value = false;
        for (const WireField& vf : *value_fields) {
          if (vf.number == 1 && expect_wire_type(vf, 2, "tag", error)) {
            v.tag = vf.bytes;
          } else if (vf.number == 2 && expect_wire_type(vf, 5, "simple_value", error)) {
            const auto bits = static_cast<uint32_t>(vf.integer);
            std::memcpy(&v.value, &bits, 4);
            has_value = true;
          } else {
            if (error.empty()) error = "unexpected Value field " + std::to_string(vf.number);
            return std::nullopt;
          }
        }
        if (!has_value) {
          error = "Value '" + v.tag + "' has no simple_value";
          return std::nullopt;
        }
        e.values.push_back(v);
      }
    } else {
      error = "unexpected Event field " + std::to_string(f.number);
      return std::nullopt;
    }
  }
  return e;
}

struct DecodedFile {
  std::vector<DecodedEvent> events;  // every record before the first problem
  std::string error;                 // empty when the whole file decoded cleanly
};

// TFRecord: uint64 length, uint32 masked crc(length bytes), data, uint32 masked crc(data).
inline DecodedFile decode_event_bytes(std::string_view bytes) {
  DecodedFile out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const std::string where =
        "record " + std::to_string(out.events.size()) + " at byte " + std::to_string(pos) + ": ";
    if (bytes.size() - pos < 12) {
      out.error = where + "truncated header";
      return out;
    }
    // The length is trusted only after its own CRC matches: a flipped bit there must not
    // send the reader off to a bogus offset.
    if (reference_crc().masked(bytes.substr(pos, 8)) != read_le(bytes, pos + 8, 4)) {
      out.error = where + "length CRC mismatch";
      return out;
    }
    const uint64_t length = read_le(bytes, pos, 8);
    if (length > bytes.size() - pos - 12 || bytes.size() - pos - 12 - length < 4) {
      out.error = where + "truncated data";
      return out;
    }
    const std::string_view data = bytes.substr(pos + 12, length);
    if (reference_crc().masked(data) != read_le(bytes, pos + 12 + length, 4)) {
      out.error = where + "data CRC mismatch";
      return out;
    }
    std::string error;
    auto event = decode_event(data, error);
    if (!event) {
      out.error = where + error;
      return out;
    }
    out.events.push_back(std::move(*event));
    pos += 12 + length + 4;
  }
  return out;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline DecodedFile decode_event_file(const std::string& path) {
  return decode_event_bytes(slurp(path));
}

inline std::string hex(std::string_view bytes) {
  std::string out;
  char buf[4];
  for (unsigned char b : bytes) {
    std::snprintf(buf, sizeof(buf), "%02X", b);
    if (!out.empty()) out += ' ';
    out += buf;
  }
  return out;
}

}  // namespace cann::test

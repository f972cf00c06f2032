// Protobuf wire-format encoding (see protobuf_wire.h for the format). Fixed-width values are
// written byte by byte from their bit pattern, so the output is little-endian on any host.
#include "monitor/protobuf_wire.h"

#include <bit>

#include "core/check.h"

namespace cann::monitor::pb {
namespace {

void put_little_endian(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

}  // namespace

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, int field, WireType type) {
  // Field numbers run from 1 to 2^29 - 1; anything else is a bug in the caller's schema.
  CANN_CHECK(field >= 1 && field < (1 << 29)) << "protobuf field number " << field;
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(type));
}

void put_int64_field(std::string& out, int field, int64_t value) {
  put_key(out, field, WireType::kVarint);
  put_varint(out, static_cast<uint64_t>(value));  // two's complement: -1 is ten bytes
}

void put_double_field(std::string& out, int field, double value) {
  put_key(out, field, WireType::kFixed64);
  put_little_endian(out, std::bit_cast<uint64_t>(value), 8);
}

void put_float_field(std::string& out, int field, float value) {
  put_key(out, field, WireType::kFixed32);
  put_little_endian(out, std::bit_cast<uint32_t>(value), 4);
}

void put_bytes_field(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, WireType::kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

}  // namespace cann::monitor::pb

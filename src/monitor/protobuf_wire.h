// The few pieces of the protobuf wire format that TensorBoard's Event messages need, so that
// event files can be written without linking protobuf or TensorFlow.
//
// A serialized message is a flat sequence of fields. Each field starts with a key, the varint
// (field_number << 3) | wire_type, followed by a payload whose shape the wire type gives:
//   0  varint            int32/int64/uint64/bool/enum: 7 bits per byte, low group first, the
//                        high bit set on every byte but the last (300 -> AC 02)
//   1  fixed64           double/fixed64: 8 bytes, little-endian
//   2  length-delimited  string/bytes/embedded message: varint byte count, then the bytes
//   5  fixed32           float/fixed32: 4 bytes, little-endian
// Worked example: field 1 holding the double 1.5 is key (1 << 3) | 1 = 0x09, then 1.5's IEEE
// bits 0x3FF8000000000000 low byte first: 09 00 00 00 00 00 00 F8 3F.
// Negative int64 values are sign-extended to 64 bits and take ten varint bytes, as protobuf's
// own int64 (not sint64) encoding does. The field numbers of the messages themselves belong
// to their schema and are written down where the messages are built (monitor/tensorboard.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cann::monitor::pb {

enum class WireType : uint8_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kFixed32 = 5,
};

// Each function appends to `out`; the field functions write the key and then the payload.
void put_varint(std::string& out, uint64_t value);
void put_key(std::string& out, int field, WireType type);
void put_int64_field(std::string& out, int field, int64_t value);
void put_double_field(std::string& out, int field, double value);
void put_float_field(std::string& out, int field, float value);
// Strings, bytes and embedded messages (already serialized into `bytes`) share one encoding.
void put_bytes_field(std::string& out, int field, std::string_view bytes);

}  // namespace cann::monitor::pb

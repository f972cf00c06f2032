// CRC-32C (Castagnoli), the checksum of checkpoints and, later, of TensorBoard's TFRecord
// framing. Uses the SSE4.2 instruction when the CPU has it, a table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cann {

// Extends `crc` (0 to start) over `size` bytes.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);
inline uint32_t crc32c(const void* data, size_t size) {
  return crc32c_extend(0, data, size);
}

}  // namespace cann

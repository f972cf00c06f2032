// Private to src/ckpt: the constants of the on-disk layout and the small POSIX helpers shared
// by the writer (checkpoint.cc) and the reader (checkpoint_read.cc). The layout itself is
// described in checkpoint.h; keeping its numbers in one place keeps both sides in agreement.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace cann::ckpt::internal {

inline constexpr char kFormatName[] = "cann-train-checkpoint";
inline constexpr char kManifestName[] = "manifest.json";
inline constexpr char kDataName[] = "data.bin";
// A manifest field: true for a memory snapshot (snapshot_writer.h), whose sections carry the
// word sum of core/word_sum.h (16 hex digits) instead of a crc32c.
inline constexpr char kMemorySnapshotKey[] = "memory_snapshot";
inline constexpr char kWordSumKey[] = "wsum64";
// Sections start at multiples of 64 bytes: a cache line, and enough for any SIMD load, so a
// reader may map the file and use the sections in place.
inline constexpr uint64_t kAlign = 64;
// data.bin begins with magic (8 bytes), version (u32 LE), header size (u32 LE).
inline constexpr size_t kHeaderFields = 16;
// This writer pads the header to one alignment unit; readers take the size from the file.
inline constexpr uint64_t kHeaderBytes = kAlign;

// "step-00000100", the name of a published step directory.
std::string step_name(int64_t step);
// The step number of a name "step-<digits>", or -1 for anything else (temporaries, files).
int64_t parse_step_name(const std::string& name);

inline uint64_t align_up(uint64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

inline void put_u32_le(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

inline uint32_t get_u32_le(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// Owns a file descriptor. The destructor closes silently (error paths); a writer calls close()
// itself and checks the result, since a failed close can be the first report of a lost write.
class FileHandle {
 public:
  explicit FileHandle(int fd) : fd_(fd) {}
  ~FileHandle() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  int fd() const { return fd_; }
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

}  // namespace cann::ckpt::internal

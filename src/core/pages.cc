// madvise and mincore over the pages of a buffer, and the flat buffers' storage
// (AlignedBuffer's allocation: aligned_alloc for small ones, huge-page mappings for large).
#include "core/pages.h"

#include "core/aligned_buffer.h"
#include "core/check.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace cann {
namespace {

uintptr_t page_size() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

void zero_and_release(void* p, size_t n) {
  if (n == 0) return;
  const uintptr_t ps = page_size();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + n;
  const uintptr_t inner_begin = (begin + ps - 1) / ps * ps, inner_end = end / ps * ps;
  if (inner_begin >= inner_end) {
    std::memset(p, 0, n);
    return;
  }
  std::memset(p, 0, inner_begin - begin);
  std::memset(reinterpret_cast<void*>(inner_end), 0, end - inner_end);
  if (madvise(reinterpret_cast<void*>(inner_begin), inner_end - inner_begin, MADV_DONTNEED) != 0)
    std::memset(reinterpret_cast<void*>(inner_begin), 0, inner_end - inner_begin);
}

size_t resident_bytes(const void* p, size_t n) {
  if (n == 0) return 0;
  const uintptr_t ps = page_size();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / ps * ps;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n + ps - 1) / ps * ps;
  std::vector<unsigned char> vec((end - begin) / ps);
  if (mincore(reinterpret_cast<void*>(begin), end - begin, vec.data()) != 0) return 0;
  size_t pages = 0;
  for (unsigned char v : vec) pages += v & 1;
  return pages * ps;
}

namespace aligned_detail {

void* allocate(size_t bytes, size_t* mapped) {
  *mapped = 0;
  if (bytes < kMappedBytes) {
    void* p = std::aligned_alloc(64, bytes);
    CANN_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
    std::memset(p, 0, bytes);
    return p;
  }
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const size_t length = (bytes + kHuge - 1) / kHuge * kHuge;
  // Map one huge page more than needed and trim both ends, so the buffer starts on a 2 MiB
  // boundary and every page of it can be a huge one.
  void* raw =
      mmap(nullptr, length + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CANN_CHECK(raw != MAP_FAILED) << "out of memory mapping " << bytes
                                << " bytes: " << std::strerror(errno);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (begin + kHuge - 1) / kHuge * kHuge;
  if (start > begin) munmap(raw, start - begin);
  const uintptr_t tail = start + length, end = begin + length + kHuge;
  if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
  // Advice only: where transparent huge pages are off the buffer works the same in 4 KiB pages.
  madvise(reinterpret_cast<void*>(start), length, MADV_HUGEPAGE);
  *mapped = length;
  return reinterpret_cast<void*>(start);
}

void release(void* p, size_t mapped) {
  if (mapped == 0)
    std::free(p);
  else
    munmap(p, mapped);
}

}  // namespace aligned_detail

int64_t process_resident_bytes() {
  // /proc files report a size of 0: read line by line until VmRSS.
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  long long kb = -1;
  while (kb < 0 && std::fgets(line, sizeof(line), f) != nullptr)
    if (std::sscanf(line, "VmRSS: %lld kB", &kb) != 1) kb = -1;
  std::fclose(f);
  return kb < 0 ? 0 : static_cast<int64_t>(kb) * 1024;
}

}  // namespace cann

// madvise and mincore over the pages of a buffer.
#include "core/pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
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

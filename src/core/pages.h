// Returning the physical memory behind part of a buffer to the system, and asking how much of
// a buffer is resident. ZeRO stage 2 uses them on the flat gradient buffer: once a bucket's
// gradients have been copied out for their reduce-scatter, the bucket's pages are released, so
// a rank holds in memory only the buckets still in flight plus its gradient shard, while the
// model keeps writing gradients at fixed offsets of one flat buffer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cann {

// Sets bytes [p, p + n) to zero. The whole pages inside the range are handed back to the
// kernel (madvise MADV_DONTNEED: they read as zeros and take no memory until written again);
// the partial pages at either end are cleared with memset. p must point into private anonymous
// memory (malloc'd or mmap'd), which every AlignedBuffer is.
void zero_and_release(void* p, size_t n);

// Bytes of the pages overlapping [p, p + n) that are resident in memory (mincore), or 0 when
// the kernel cannot say.
size_t resident_bytes(const void* p, size_t n);

// This process's resident set (VmRSS in /proc/self/status), in bytes; 0 when unreadable.
int64_t process_resident_bytes();

}  // namespace cann

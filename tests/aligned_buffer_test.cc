// The flat buffers' storage: zero, aligned, and (when large) not touched before it is written.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/aligned_buffer.h"
#include "core/pages.h"

namespace cann {
namespace {

bool all_zero(const AlignedBuffer<float>& b) {
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i] != 0.0f) return false;
  return true;
}

TEST(AlignedBufferTest, SmallAndLargeBuffersStartZeroAndAligned) {
  // Below, at and above the size where a buffer becomes a mapping of its own.
  for (size_t n : {size_t{1}, size_t{1000}, (size_t{4} << 20) / 4 - 1, (size_t{4} << 20) / 4,
                   size_t{3} << 20}) {
    AlignedBuffer<float> b(n);
    ASSERT_EQ(b.size(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u) << n;
    EXPECT_TRUE(all_zero(b)) << n;
    for (size_t i = 0; i < n; ++i) b[i] = 1.0f;
    b.resize(n);  // discards: zero again, whichever storage it came from
    EXPECT_TRUE(all_zero(b)) << n;
    b[n - 1] = 2.0f;
    b.zero();
    EXPECT_TRUE(all_zero(b)) << n;
  }
}

TEST(AlignedBufferTest, ALargeBufferTakesNoMemoryUntilWritten) {
  // 64 MiB: every page of it would be resident had it been cleared up front.
  AlignedBuffer<float> b(size_t{16} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (size_t{2} << 20), 0u);
  EXPECT_EQ(resident_bytes(b.data(), b.bytes()), 0u);
  for (size_t i = 0; i < b.size(); i += 1024) b[i] = 1.0f;
  EXPECT_EQ(resident_bytes(b.data(), b.bytes()), b.bytes());
  // Released pages read as zeros again (ZeRO's gradient buffer does this per bucket).
  zero_and_release(b.data() + 1000, (b.size() - 2000) * sizeof(float));
  for (size_t i = 0; i < b.size(); i += 1024)
    ASSERT_EQ(b[i], i < 1000 || i >= b.size() - 1000 ? 1.0f : 0.0f) << i;
}

}  // namespace
}  // namespace cann

// The agent's output prefixing: every line gets "[rank N] ", a redrawn line keeps the prefix
// after its "\r\033[K", and other carriage returns pass through as text.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "elastic/output_forwarder.h"

namespace cann::elastic {
namespace {

std::string forward(std::initializer_list<std::string> chunks) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  {
    OutputForwarder fwd(f, "[r1] ");
    for (const auto& c : chunks) fwd.write(c);
    fwd.finish();
  }
  std::fclose(f);
  std::string out(buf, len);
  std::free(buf);
  return out;
}

TEST(OutputForwarderTest, PrefixesEveryLineAcrossChunks) {
  EXPECT_EQ(forward({"hello\nwor", "ld\n\nend"}), "[r1] hello\n[r1] world\n\n[r1] end\n");
}

TEST(OutputForwarderTest, RedrawKeepsThePrefix) {
  // The escape sequence may arrive split over reads.
  EXPECT_EQ(forward({"\r\033[Kstep 1", "\r\033", "[Kstep 2\n"}),
            "\r\033[K[r1] step 1\r\033[K[r1] step 2\n");
}

TEST(OutputForwarderTest, OtherCarriageReturnsAreText) {
  EXPECT_EQ(forward({"a\r\nb\rc\n"}), "[r1] a\r\n[r1] b\rc\n");
}

}  // namespace
}  // namespace cann::elastic

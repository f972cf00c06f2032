// CANN_CHECK: invariants that, when broken, mean a bug in cann-train rather than bad input.
// A failed check prints file:line and the streamed message, then aborts. Bad input never
// reaches a check: it is turned into a Status first.
#pragma once

#include <sstream>

namespace cann::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `CANN_CHECK(x) << "msg"` compile to nothing extra when x holds.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace cann::internal

#define CANN_CHECK(cond)                 \
  (cond) ? (void)0                       \
         : ::cann::internal::Voidify() & \
               ::cann::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

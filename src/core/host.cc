// This machine's name (see host.h).
#include "core/host.h"

#include <unistd.h>

namespace cann {

const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return std::string("localhost");
    return std::string(buf);
  }();
  return name;
}

}  // namespace cann

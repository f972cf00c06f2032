#include "core/int_items.h"

#include <cstdlib>

namespace cann {

StatusOr<std::vector<IntItem>> parse_int_items(const std::string& text, const std::string& what) {
  std::vector<IntItem> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return InvalidArgument("'" + item + "' is not KEY=N");
    const std::string value = item.substr(eq + 1);
    char* end = nullptr;
    const long n = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0') return InvalidArgument("'" + value + "' is not " + what);
    out.push_back({item.substr(0, eq), n});
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

}  // namespace cann

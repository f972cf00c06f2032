// Lookup over the generated table of embedded files.
#include "core/embedded.h"

#include <algorithm>

namespace cann {

std::optional<std::string_view> embedded_file(std::string_view path) {
  for (const EmbeddedFile& f : embedded_files())
    if (path == f.path) return std::string_view(f.content);
  return std::nullopt;
}

std::vector<std::string> embedded_names(std::string_view dir, std::string_view ext) {
  std::vector<std::string> names;
  for (const EmbeddedFile& f : embedded_files()) {
    std::string_view p = f.path;
    if (p.size() <= dir.size() + ext.size() + 1 || p.substr(0, dir.size()) != dir ||
        p[dir.size()] != '/' || p.substr(p.size() - ext.size()) != ext)
      continue;
    std::string_view stem = p.substr(dir.size() + 1, p.size() - dir.size() - 1 - ext.size());
    if (stem.find('/') == std::string_view::npos) names.emplace_back(stem);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace cann

// Text files compiled into the binary (configs/models, configs/clusters, the dashboard in web/),
// looked up by their path relative to the repository root, e.g. "configs/models/gpt_tiny.yaml".
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cann {

struct EmbeddedFile {
  const char* path;
  const char* content;
};

std::span<const EmbeddedFile> embedded_files();
std::optional<std::string_view> embedded_file(std::string_view path);
// Stems of the embedded files directly under `dir` with extension `ext` (".yaml"), sorted.
std::vector<std::string> embedded_names(std::string_view dir, std::string_view ext);

}  // namespace cann

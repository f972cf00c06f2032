// File helpers that turn every OS error into a Status naming the path, and the one way
// cann-train replaces a file: write a temporary, fsync it, rename over, fsync the directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cann {

StatusOr<std::string> read_file(const std::string& path);
// Writes `data` to `path` atomically: a reader sees the old file or the complete new one.
Status write_file_atomic(const std::string& path, std::string_view data);
// fsync on a directory, so a rename inside it survives a power cut.
Status fsync_dir(const std::string& dir);
// Writes all of `data` to an open descriptor, retrying short writes; names `path` on error.
Status write_all(int fd, const void* data, size_t size, const std::string& path);
Status read_exact(int fd, void* data, size_t size, const std::string& path);
// Creates a directory and its parents (mkdir -p).
Status make_dirs(const std::string& dir);
// Removes a file or a directory tree; missing is not an error.
Status remove_all(const std::string& path);
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
// Names in a directory (no "." or ".."), sorted.
StatusOr<std::vector<std::string>> list_dir(const std::string& dir);
std::string join_path(std::string_view a, std::string_view b);
// "strerror(errno)" for the current errno.
std::string errno_text();

}  // namespace cann

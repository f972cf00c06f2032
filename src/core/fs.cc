// POSIX implementations of the file helpers.
#include "core/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace cann {

std::string errno_text() {
  return std::strerror(errno);
}

std::string join_path(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  std::string out(a);
  if (out.back() != '/') out += '/';
  out += b;
  return out;
}

StatusOr<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file; hint: check the path");
    return IoError(path + ": cannot open: " + errno_text());
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    return IoError(path + ": is not a regular file");
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  Status s = read_exact(fd, data.data(), data.size(), path);
  ::close(fd);
  if (!s.ok()) return s;
  return data;
}

Status write_all(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOSPC) return IoError(path + ": disk full while writing; hint: free space");
      return IoError(path + ": write failed: " + errno_text());
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status read_exact(int fd, void* data, size_t size, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::read(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(path + ": read failed: " + errno_text());
    }
    if (n == 0) return DataLoss(path + ": file ends early (truncated?)");
    p += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError(dir + ": cannot open directory: " + errno_text());
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return IoError(dir + ": fsync failed: " + errno_text());
  return OkStatus();
}

Status write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(tmp + ": cannot create: " + errno_text());
  Status s = write_all(fd, data.data(), data.size(), tmp);
  if (s.ok() && ::fsync(fd) != 0) s = IoError(tmp + ": fsync failed: " + errno_text());
  ::close(fd);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status err = IoError(path + ": rename failed: " + errno_text());
    ::unlink(tmp.c_str());
    return err;
  }
  return fsync_dir(std::filesystem::path(path).parent_path().string());
}

Status make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError(dir + ": cannot create directory: " + ec.message());
  return OkStatus();
}

Status remove_all(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return IoError(path + ": cannot remove: " + ec.message());
  return OkStatus();
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

StatusOr<std::vector<std::string>> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return NotFound(dir + ": no such directory");
    return IoError(dir + ": cannot list: " + errno_text());
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace cann

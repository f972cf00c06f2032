// FileStore: the store in one directory, shared by every process on a machine (the embedded
// default: nothing to start, nothing to install). One file per key; the file's bytes are the
// value.
//
// Safety under concurrent processes:
//   - a value is written to a temporary file and renamed over the key's file, so a reader sees
//     the old value or the whole new one, never a torn write;
//   - every mutation (set, add, compare_set, remove) holds flock() on the directory's lock file,
//     so read-modify-write is atomic across processes, and set cannot slip between the read and
//     the write of a compare_set. flock locks belong to an open file description, so each call
//     opens the lock file afresh and threads of one process exclude each other too;
//   - readers take no lock: rename is atomic.
// Waiting polls with a short backoff (no inotify: it does not work on network file systems).
//
// Key -> file name: bytes outside [A-Za-z0-9._-] (and a leading '.') become %XX, so keys with
// '/' stay in one flat directory and never collide with the store's own dot files. Names longer
// than 200 bytes keep a readable head plus '~' and a 64-bit hash of the whole key.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "comm/store_backends.h"
#include "core/fs.h"

namespace cann::comm {
namespace {

// Magic and version of the directory layout, in the marker file every FileStore directory has.
constexpr std::string_view kFormatMarker = "cann-file-store 1\n";
constexpr size_t kMaxNameLength = 200;

std::string file_name_for(const std::string& key) {
  static const char* kHex = "0123456789ABCDEF";
  std::string name;
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == '-' || (c == '.' && i > 0);
    if (plain) {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  if (name.empty()) name.push_back('%');  // the empty key
  if (name.size() <= kMaxNameLength) return name;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char suffix[24];
  std::snprintf(suffix, sizeof(suffix), "~%016llx", static_cast<unsigned long long>(h));
  return name.substr(0, kMaxNameLength - 17) + suffix;
}

// Holds the directory's exclusive lock for its lifetime. A mutation holds it for a few
// milliseconds, so a lock held for kLockTimeout means its holder is stopped or stuck: the wait
// ends with an error rather than hanging every writer of the store behind it.
constexpr auto kLockTimeout = std::chrono::seconds(10);

class DirLock {
 public:
  explicit DirLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      status_ = IoError("cannot open lock file " + path + ": " + errno_text());
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + kLockTimeout;
    auto pause = std::chrono::microseconds(200);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        status_ = IoError("cannot lock " + path + ": " + errno_text());
        return;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        status_ = IoError("file store lock " + path + " has been held by another process for " +
                          std::to_string(kLockTimeout.count()) +
                          " s; hint: a stopped or hung process holds it (find it with `fuser " +
                          path + "`)");
        return;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
  }
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
  }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  const Status& status() const { return status_; }

 private:
  int fd_ = -1;
  Status status_;
};

class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)), address_("file://" + dir_) {}

  Status init() {
    CANN_RETURN_IF_ERROR(make_dirs(dir_));
    const std::string marker = dir_ + "/.cann-store";
    CANN_ASSIGN_OR_RETURN(auto existing, read_value(marker));
    if (!existing) return write_value(marker, kFormatMarker);
    if (*existing != kFormatMarker)
      return DataLoss(marker +
                      " is not a version-1 cann-train file store; hint: point the store "
                      "at an empty directory");
    return OkStatus();
  }

  Status set(const std::string& key, std::string_view value) override {
    DirLock lock(lock_path());
    CANN_RETURN_IF_ERROR(lock.status());
    return write_value(path_for(key), value);
  }

  StatusOr<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override {
    PollBackoff backoff(timeout);
    do {
      CANN_ASSIGN_OR_RETURN(auto v, read_value(path_for(key)));
      if (v) return std::move(*v);
    } while (backoff.sleep());
    return missing_keys_error(address_, {key}, timeout);
  }

  StatusOr<std::optional<std::string>> try_get(const std::string& key) override {
    return read_value(path_for(key));
  }

  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    DirLock lock(lock_path());
    CANN_RETURN_IF_ERROR(lock.status());
    const std::string path = path_for(key);
    CANN_ASSIGN_OR_RETURN(auto v, read_value(path));
    int64_t current = 0;
    if (v) {
      CANN_ASSIGN_OR_RETURN(current, parse_counter(*v, key, address_));
    }
    const int64_t result =
        static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(delta));
    CANN_RETURN_IF_ERROR(write_value(path, std::to_string(result)));
    return result;
  }

  StatusOr<std::string> compare_set(const std::string& key,
                                    const std::optional<std::string>& expected,
                                    std::string_view desired) override {
    DirLock lock(lock_path());
    CANN_RETURN_IF_ERROR(lock.status());
    const std::string path = path_for(key);
    CANN_ASSIGN_OR_RETURN(auto v, read_value(path));
    const bool matches = v ? expected.has_value() && *expected == *v : !expected.has_value();
    if (!matches) return v ? std::move(*v) : std::string();
    CANN_RETURN_IF_ERROR(write_value(path, desired));
    return std::string(desired);
  }

  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    PollBackoff backoff(timeout);
    std::vector<std::string> missing;
    do {
      missing.clear();
      for (const auto& k : keys)
        if (::access(path_for(k).c_str(), F_OK) != 0) missing.push_back(k);
      if (missing.empty()) return OkStatus();
    } while (backoff.sleep());
    return missing_keys_error(address_, missing, timeout);
  }

  StatusOr<bool> remove(const std::string& key) override {
    DirLock lock(lock_path());
    CANN_RETURN_IF_ERROR(lock.status());
    const std::string path = path_for(key);
    if (::unlink(path.c_str()) == 0) return true;
    if (errno == ENOENT) return false;
    return IoError("cannot remove " + path + ": " + errno_text());
  }

  std::string address() const override { return address_; }

 private:
  std::string path_for(const std::string& key) const { return dir_ + "/" + file_name_for(key); }
  std::string lock_path() const { return dir_ + "/.lock"; }

  // The value, or nullopt when the file does not exist.
  StatusOr<std::optional<std::string>> read_value(const std::string& path) const {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return std::optional<std::string>();
      return IoError("cannot read " + path + " in store " + address_ + ": " + errno_text());
    }
    std::string data;
    char buf[4096];
    while (true) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const std::string why = errno_text();
        ::close(fd);
        return IoError("cannot read " + path + ": " + why);
      }
      if (n == 0) break;
      data.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return std::optional<std::string>(std::move(data));
  }

  // Temporary file + rename. No fsync: a store lives as long as the job, not across power cuts.
  Status write_value(const std::string& path, std::string_view value) const {
    static std::atomic<uint64_t> counter{0};
    const std::string tmp =
        dir_ + "/.tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return IoError("cannot create " + tmp + ": " + errno_text());
    Status s = write_all(fd, value.data(), value.size(), tmp);
    ::close(fd);
    if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
      s = IoError("cannot rename " + tmp + " to " + path + ": " + errno_text());
    if (!s.ok()) ::unlink(tmp.c_str());
    return s;
  }

  const std::string dir_;
  const std::string address_;
};

}  // namespace

StatusOr<std::shared_ptr<Store>> open_file_store(const std::string& dir) {
  if (dir.empty()) return InvalidArgument("file store needs a directory; hint: file:///tmp/store");
  std::error_code ec;
  std::string abs = std::filesystem::absolute(dir, ec).lexically_normal().string();
  if (ec) abs = dir;
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  auto store = std::make_shared<FileStore>(abs);
  CANN_RETURN_IF_ERROR(store->init());
  return std::shared_ptr<Store>(std::move(store));
}

}  // namespace cann::comm

// TensorBoard event files: the Event protobuf built by hand, TFRecord framing, and the file
// writer with its failure handling (see tensorboard.h).
//
// The messages, from TensorFlow's event.proto and summary.proto, cut to what scalars use:
//   Event   { double wall_time = 1; int64 step = 2;
//             oneof what { string file_version = 3; Summary summary = 5; } }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; oneof value { float simple_value = 2; } }
// so the keys are 0x09 (field 1, fixed64), 0x10 (field 2, varint), 0x1A (field 3,
// length-delimited), 0x2A (field 5, length-delimited) in an Event, 0x0A in a Summary, and 0x0A
// (field 1, length-delimited) and 0x15 (field 2, fixed32) in a Value. As proto3 serializers
// do, wall_time and step are left out when zero (a reader then sees the default, zero), so the
// file-version record has the bytes TensorFlow writes for the same wall_time; simple_value
// sits in a oneof, so it is written even when zero.
#include "monitor/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

#include "core/crc32c.h"
#include "core/fs.h"
#include "core/log.h"
#include "monitor/protobuf_wire.h"

namespace cann::monitor {
namespace {

constexpr size_t kWriteThresholdBytes = 64 << 10;
constexpr size_t kMaxPendingBytes = 4 << 20;  // about 60,000 scalars held while writes fail

// Event field numbers.
constexpr int kEventWallTime = 1;
constexpr int kEventStep = 2;
constexpr int kEventFileVersion = 3;
constexpr int kEventSummary = 5;
// Summary and Summary.Value field numbers.
constexpr int kSummaryValue = 1;
constexpr int kValueTag = 1;
constexpr int kValueSimpleValue = 2;

// Counts the event files this process opened: the last part of the file name.
std::atomic<uint64_t> next_file_counter{0};

std::string event_header(double wall_time, int64_t step) {
  std::string event;
  if (std::bit_cast<uint64_t>(wall_time) != 0)
    pb::put_double_field(event, kEventWallTime, wall_time);
  if (step != 0) pb::put_int64_field(event, kEventStep, step);
  return event;
}

// double -> float, saturating to +-inf: converting a finite double beyond float's range is
// undefined behaviour in C++, and infinity is what the value means on a chart.
float to_simple_value(double value) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (value > kMax) return std::numeric_limits<float>::infinity();
  if (value < -kMax) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(value);  // NaN stays NaN
}

// TFRecord's masking: a CRC stored next to the data it covers is rotated and offset, so that
// data which itself contains CRCs (a record of records) does not checksum to trivial values.
uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void put_u32_le(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string event = event_header(wall_time, 0);
  pb::put_bytes_field(event, kEventFileVersion, "brain.Event:2");
  return event;
}

std::string encode_scalar_event(std::string_view tag, double value, int64_t step,
                                double wall_time) {
  std::string summary_value;
  pb::put_bytes_field(summary_value, kValueTag, tag);
  pb::put_float_field(summary_value, kValueSimpleValue, to_simple_value(value));
  std::string summary;
  pb::put_bytes_field(summary, kSummaryValue, summary_value);
  std::string event = event_header(wall_time, step);
  pb::put_bytes_field(event, kEventSummary, summary);
  return event;
}

std::string frame_tfrecord(std::string_view data) {
  std::string record;
  record.reserve(8 + 4 + data.size() + 4);
  const uint64_t length = data.size();
  for (int i = 0; i < 8; ++i) record.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  put_u32_le(record, masked_crc32c(record.data(), 8));
  record.append(data);
  put_u32_le(record, masked_crc32c(data.data(), data.size()));
  return record;
}

StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::open(const std::string& logdir) {
  CANN_RETURN_IF_ERROR(make_dirs(logdir));
  const double now = unix_now();
  const std::string prefix = "events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) +
                             "." + host_name() + "." + std::to_string(::getpid()) + ".";
  // O_EXCL: a file left by an earlier process with the same pid (containers restart at low
  // pids) is skipped, never appended to or truncated.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const std::string path = join_path(logdir, prefix + std::to_string(next_file_counter++));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      return IoError(path + ": cannot create event file: " + errno_text() +
                     "; hint: check that the log directory is writable");
    }
    const std::string record = frame_tfrecord(encode_file_version_event(now));
    Status s = write_all(fd, record.data(), record.size(), path);
    if (!s.ok()) {
      ::close(fd);
      ::unlink(path.c_str());  // an empty or torn file would only confuse TensorBoard
      return s;
    }
    auto writer = std::make_unique<TensorBoardWriter>(PrivateKey{}, path, fd);
    writer->committed_bytes_ = record.size();
    return writer;
  }
  return IoError(join_path(logdir, prefix + "*") +
                 ": every candidate file name exists; hint: clean up the log directory");
}

TensorBoardWriter::TensorBoardWriter(PrivateKey, std::string path, int fd)
    : path_(std::move(path)), fd_(fd) {}

TensorBoardWriter::~TensorBoardWriter() {
  std::lock_guard<std::mutex> lock(file_mutex_);
  Status s = write_pending_locked();
  if (!s.ok()) log_warning("TensorBoard events lost at close: " + s.message());
  ::close(fd_);
}

Status TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step,
                                     double wall_time) {
  if (tag.empty()) {
    return InvalidArgument("TensorBoard scalar at step " + std::to_string(step) +
                           " has an empty tag; hint: name the series, e.g. \"train/loss\"");
  }
  const std::string record = frame_tfrecord(encode_scalar_event(tag, value, step, wall_time));
  std::lock_guard<std::mutex> lock(file_mutex_);
  if (pending_.size() + record.size() > kMaxPendingBytes) {
    // Only reachable while writes keep failing: one more try before giving up on this event.
    Status s = write_pending_locked();
    if (!s.ok()) {
      return IoError(s.message() + "; dropped scalar '" + tag + "' at step " +
                     std::to_string(step));
    }
  }
  pending_ += record;
  if (pending_.size() >= kWriteThresholdBytes) return write_pending_locked();
  return OkStatus();
}

Status TensorBoardWriter::flush() {
  std::lock_guard<std::mutex> lock(file_mutex_);
  return write_pending_locked();
}

Status TensorBoardWriter::write_pending_locked() {
  if (pending_.empty()) return OkStatus();
  Status s = write_all(fd_, pending_.data(), pending_.size(), path_);
  if (s.ok()) {
    committed_bytes_ += pending_.size();
    pending_.clear();
    return OkStatus();
  }
  // Part of the buffer may have reached the file, ending in the middle of a record. Readers
  // stop there, and a retry appended after it would never be seen: cut back to the last whole
  // record, so the retry continues the file cleanly.
  std::string message = s.message();
  if (::ftruncate(fd_, static_cast<off_t>(committed_bytes_)) != 0) {
    message += "; cutting back to the last whole record also failed: " + errno_text();
  }
  return IoError(message + " (" + std::to_string(pending_.size()) +
                 " bytes of events kept for the next flush)");
}

}  // namespace cann::monitor

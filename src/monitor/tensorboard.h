// TensorBoard scalar event files, written natively: no TensorFlow, no protobuf library.
//
// An event file is a sequence of TFRecords, each holding one serialized Event protobuf: first
// a file-version event ("brain.Event:2", which TensorBoard checks), then one event per scalar.
// TensorBoard scans a log directory for files named events.out.tfevents.*, reads records up to
// the first incomplete one, and picks up appended records as they arrive, so a writer only
// ever appends whole records.
//
// Thread-safety: add_scalar, flush and the destructor may be called from any thread; one
// mutex (file_mutex_) guards the buffer and the file.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/status.h"

namespace cann::monitor {

// Writes events.out.tfevents.<unix seconds>.<hostname>.<pid>.<counter> in `logdir` (created if
// missing): a file-version event first ("brain.Event:2"), then one event per add_scalar call.
// <counter> counts the files this process opened, so two writers opened in the same second
// get different names; an existing file is never overwritten.
class TensorBoardWriter {
  struct PrivateKey {
    explicit PrivateKey() = default;
  };

 public:
  // Creates the file and writes the file-version event through to the OS, so a read-only or
  // full disk is reported here rather than at the first scalar.
  static StatusOr<std::unique_ptr<TensorBoardWriter>> open(const std::string& logdir);
  TensorBoardWriter(PrivateKey, std::string path, int fd);  // use open()
  // Writes what is still buffered (an error is logged, not returned) and closes the file.
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Buffers one scalar event (the value is stored as a float, as TensorBoard's simple_value
  // is; magnitudes beyond float range become +-inf). The buffer goes to the file when it
  // reaches 64 KiB or at flush(). An error means either an empty tag (nothing buffered) or a
  // refused write: the events stay buffered, up to 4 MiB, and are retried at the next write;
  // past that, the new scalar is dropped and the message says so.
  Status add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  // Hands everything buffered to the OS (write(2), no fsync: TensorBoard reads through the
  // page cache, and losing the last events on a power cut is acceptable for metrics). On an
  // error (disk full) the file is cut back to its last whole record, so readers keep every
  // event before it, and the events stay buffered for the next try.
  Status flush();
  const std::string& path() const { return path_; }

 private:
  Status write_pending_locked();

  const std::string path_;
  const int fd_;  // opened O_APPEND, so a write after a truncation lands at the new end

  std::mutex file_mutex_;
  std::string pending_;           // whole framed records not yet written
  uint64_t committed_bytes_ = 0;  // file size up to the last fully written record
};

// The pieces of the format, public so that tests can check them against bytes derived by hand.
// An Event with wall_time and file_version "brain.Event:2".
std::string encode_file_version_event(double wall_time);
// An Event with wall_time, step and a Summary holding one Value {tag, simple_value}.
std::string encode_scalar_event(std::string_view tag, double value, int64_t step, double wall_time);
// One TFRecord: uint64 length, uint32 masked CRC-32C of the length bytes, the data, uint32
// masked CRC-32C of the data; integers little-endian.
std::string frame_tfrecord(std::string_view data);

}  // namespace cann::monitor

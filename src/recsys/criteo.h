// A streaming reader of Criteo display-ads TSV (the Kaggle and Terabyte click logs), filling
// ClickBatch the way DLRM's preprocessing does.
//
// Format: one impression per line, exactly 40 tab-separated fields:
//   label \t I1 .. I13 \t C1 .. C26
// label is "0" or "1". I1..I13 are decimal integers, possibly negative, possibly empty
// (missing). C1..C26 are hashed categoricals written as up to 16 hex digits (8 in the released
// data), possibly empty. Lines may end in "\n" or "\r\n"; the last line may lack its newline.
// Any other line (a blank one included) is malformed.
//
// Each row becomes 13 dense features, log(1 + max(x, 0)) with missing as 0 (DLRM's transform:
// counts span many decades and negatives are rare noise), and 26 bags of exactly one id each:
// an empty categorical is id 0 and hex value h is id h + 1, so "missing" never collides with a
// real value. Ids stay below 2^62: the only values that would not (more than 15 hex digits) are
// folded as 1 + h mod (2^62 - 1).
//
// A reader is used by one thread at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "recsys/click_batch.h"

namespace cann::recsys {

inline constexpr int kCriteoDenseFeatures = 13;
inline constexpr int kCriteoSparseFeatures = 26;
inline constexpr int kCriteoFields = 1 + kCriteoDenseFeatures + kCriteoSparseFeatures;

// What to do with a malformed line: count it and go on, or stop with an error naming it.
enum class BadLinePolicy { kSkip, kFatal };

// Counts for the lines read since open or the last rewind (line numbers are 1-based).
struct CriteoStats {
  int64_t lines = 0, good = 0, bad = 0, first_bad_line = 0;
  std::string first_bad_reason;  // `categorical feature C3 is "zz12" (not hexadecimal)`
};

// One line for the log: "12 of 1,000 lines malformed (first at line 17: ...); skipped", or
// "1,000 lines, none malformed". Under kFatal the tail says "stopped" instead of "skipped".
std::string describe(const CriteoStats& stats, BadLinePolicy policy = BadLinePolicy::kSkip);

class CriteoReader {
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  struct PrivateKey {
    explicit PrivateKey() = default;
  };

 public:
  // Errors: NotFound for a missing path, InvalidArgument for a directory, IoError otherwise.
  static StatusOr<std::unique_ptr<CriteoReader>> open(const std::string& path,
                                                      BadLinePolicy policy);

  // Fills `out` with up to `batch` (> 0) rows and returns how many it filled: fewer than
  // `batch` only at the end of the file, 0 once there. Under kFatal a malformed line is an
  // InvalidArgument naming path:line and the fault; the reader then stands after that line and
  // `out` holds no rows. Under kSkip it is counted in stats().
  StatusOr<int> next(int batch, ClickBatch* out);

  CriteoReader(PrivateKey, std::string path, BadLinePolicy policy,
               std::unique_ptr<std::FILE, FileCloser> file);  // use open()
  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  const CriteoStats& stats() const { return stats_; }
  const std::string& path() const { return path_; }

  // Back to the first line, for another epoch; the line count and stats start again.
  Status rewind();

 private:
  struct Row {
    float label = 0;
    float dense[kCriteoDenseFeatures];
    int64_t ids[kCriteoSparseFeatures];
  };

  // The next line without its terminator; false at the end of the file.
  StatusOr<bool> next_line(std::string_view* line);

  std::string path_;
  BadLinePolicy policy_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  // Bytes read but not yet handed out are buffer_[begin_, end_).
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  CriteoStats stats_;
  std::vector<Row> rows_;  // row-major staging: the batch size is known only at the end
};

// Parses one line (no terminator) into a label, 13 dense features and 26 ids. On a malformed
// line returns false and sets `reason` (`integer feature I5 is "3.5" (not an integer)`).
bool parse_criteo_line(std::string_view line, float* label, float* dense, int64_t* ids,
                       std::string* reason);

}  // namespace cann::recsys

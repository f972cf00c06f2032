// The Criteo TSV reader: a chunked buffered read, a split on tabs, and per-field checks that
// name the first thing wrong with a line, so a user can find and fix it (or choose to skip).
#include "recsys/criteo.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/fs.h"
#include "core/numbers.h"

namespace cann::recsys {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;
constexpr int kMaxHexDigits = 16;
constexpr uint64_t kIdLimit = uint64_t{1} << 62;
constexpr char kBadLineHint[] = "hint: fix the line or pass --bad-lines skip";

// A field as the message quotes it: long garbage (a binary file, a wrong delimiter that left
// the whole line in one field) is cut so the message stays one readable line.
std::string quoted(std::string_view field) {
  constexpr size_t kMaxShown = 40;
  std::string out = "\"";
  out.append(field.substr(0, kMaxShown));
  out += '"';
  if (field.size() > kMaxShown) {
    out.insert(out.size() - 1, "...");
    out += " (" + std::to_string(field.size()) + " characters)";
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool parse_criteo_line(std::string_view line, float* label, float* dense, int64_t* ids,
                       std::string* reason) {
  std::string_view fields[kCriteoFields];
  int count = 0;
  size_t start = 0;
  while (true) {
    size_t tab = line.find('\t', start);
    std::string_view field =
        line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start);
    if (count < kCriteoFields) fields[count] = field;
    ++count;
    if (tab == std::string_view::npos) break;
    start = tab + 1;
  }
  if (count != kCriteoFields) {
    *reason = (line.empty() ? std::string("empty line") : std::to_string(count) + " fields") +
              " (expected " + std::to_string(kCriteoFields) +
              " tab-separated: label, I1..I13, C1..C26)";
    return false;
  }

  if (fields[0] == "0" || fields[0] == "1") {
    *label = fields[0] == "1" ? 1.0f : 0.0f;
  } else {
    *reason = "label is " + quoted(fields[0]) + " (expected 0 or 1)";
    return false;
  }

  for (int j = 0; j < kCriteoDenseFeatures; ++j) {
    std::string_view f = fields[1 + j];
    int64_t x = 0;
    if (!f.empty()) {
      // from_chars takes a leading '-' but not '+', which the released data never writes.
      auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), x);
      if (ec == std::errc::result_out_of_range) {
        *reason = "integer feature I" + std::to_string(j + 1) + " is " + quoted(f) +
                  " (out of the 64-bit range)";
        return false;
      }
      if (ec != std::errc() || end != f.data() + f.size()) {
        *reason =
            "integer feature I" + std::to_string(j + 1) + " is " + quoted(f) + " (not an integer)";
        return false;
      }
    }
    dense[j] = static_cast<float>(std::log1p(static_cast<double>(x > 0 ? x : 0)));
  }

  for (int j = 0; j < kCriteoSparseFeatures; ++j) {
    std::string_view f = fields[1 + kCriteoDenseFeatures + j];
    uint64_t h = 0;
    for (char c : f) {
      int v = hex_value(c);
      if (v < 0) {
        *reason = "categorical feature C" + std::to_string(j + 1) + " is " + quoted(f) +
                  " (not hexadecimal)";
        return false;
      }
      h = (h << 4) | static_cast<uint64_t>(v);
    }
    if (f.size() > kMaxHexDigits) {
      *reason = "categorical feature C" + std::to_string(j + 1) + " is " + quoted(f) +
                " (more than 16 hex digits)";
      return false;
    }
    // 0 is "missing"; values are shifted up by one. Only h >= 2^62 - 1 needs the fold.
    if (f.empty()) {
      ids[j] = 0;
    } else if (h < kIdLimit - 1) {
      ids[j] = static_cast<int64_t>(h + 1);
    } else {
      ids[j] = static_cast<int64_t>(1 + h % (kIdLimit - 1));
    }
  }
  return true;
}

std::string describe(const CriteoStats& stats, BadLinePolicy policy) {
  if (stats.bad == 0) return with_commas(stats.lines) + " lines, none malformed";
  return with_commas(stats.bad) + " of " + with_commas(stats.lines) +
         " lines malformed (first at line " + with_commas(stats.first_bad_line) + ": " +
         stats.first_bad_reason + "); " + (policy == BadLinePolicy::kSkip ? "skipped" : "stopped");
}

StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::open(const std::string& path,
                                                           BadLinePolicy policy) {
  constexpr char kFormatHint[] =
      "hint: pass a Criteo display-ads TSV file (label, 13 integer and 26 hex categorical "
      "fields per line)";
  if (!path_exists(path)) {
    return NotFound(path + ": no such file; " + kFormatHint);
  }
  if (is_directory(path)) {
    return InvalidArgument(path + ": is a directory; " + kFormatHint);
  }
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    return IoError(path + ": cannot open: " + errno_text() +
                   "; hint: check the file's permissions");
  }
  return std::make_unique<CriteoReader>(PrivateKey{}, path, policy, std::move(f));
}

CriteoReader::CriteoReader(PrivateKey, std::string path, BadLinePolicy policy,
                           std::unique_ptr<std::FILE, FileCloser> file)
    : path_(std::move(path)), policy_(policy), file_(std::move(file)), buffer_(kChunkBytes) {}

StatusOr<bool> CriteoReader::next_line(std::string_view* line) {
  while (true) {
    const char* base = buffer_.data();
    const void* nl = std::memchr(base + begin_, '\n', end_ - begin_);
    if (nl != nullptr || (eof_ && end_ > begin_)) {
      size_t stop = nl ? static_cast<size_t>(static_cast<const char*>(nl) - base) : end_;
      std::string_view text(base + begin_, stop - begin_);
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      begin_ = nl ? stop + 1 : end_;
      *line = text;
      return true;
    }
    if (eof_) return false;
    // Keep the partial line, then read more behind it; a line longer than the buffer grows it.
    if (begin_ > 0) {
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buffer_.size()) buffer_.resize(buffer_.size() * 2);
    size_t got = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, file_.get());
    end_ += got;
    if (got == 0) {
      if (std::ferror(file_.get())) {
        return IoError(path_ + ": read failed after line " + std::to_string(stats_.lines) + ": " +
                       errno_text() + "; hint: check the disk and the file");
      }
      eof_ = true;
    }
  }
}

StatusOr<int> CriteoReader::next(int batch, ClickBatch* out) {
  CANN_CHECK(batch > 0) << "batch " << batch;
  rows_.resize(batch);
  int filled = 0;
  std::string reason;
  while (filled < batch) {
    std::string_view line;
    CANN_ASSIGN_OR_RETURN(bool more, next_line(&line));
    if (!more) break;
    ++stats_.lines;
    Row& row = rows_[filled];
    if (parse_criteo_line(line, &row.label, row.dense, row.ids, &reason)) {
      ++stats_.good;
      ++filled;
      continue;
    }
    ++stats_.bad;
    if (stats_.bad == 1) {
      stats_.first_bad_line = stats_.lines;
      stats_.first_bad_reason = reason;
    }
    if (policy_ == BadLinePolicy::kFatal) {
      out->resize_one_id_per_bag(0, kCriteoDenseFeatures, kCriteoSparseFeatures, false);
      return InvalidArgument(path_ + ":" + std::to_string(stats_.lines) + ": " + reason + "; " +
                             kBadLineHint);
    }
  }

  // Row-major staging to the batch's feature-major bags: row b's id for C(f+1) goes to
  // ids[f*B + b].
  out->resize_one_id_per_bag(filled, kCriteoDenseFeatures, kCriteoSparseFeatures, false);
  for (int b = 0; b < filled; ++b) {
    const Row& row = rows_[b];
    out->labels[b] = row.label;
    std::copy(row.dense, row.dense + kCriteoDenseFeatures,
              out->dense.begin() + static_cast<int64_t>(b) * kCriteoDenseFeatures);
    for (int f = 0; f < kCriteoSparseFeatures; ++f) {
      out->ids[static_cast<int64_t>(f) * filled + b] = row.ids[f];
    }
  }
  return filled;
}

Status CriteoReader::rewind() {
  if (std::fseek(file_.get(), 0, SEEK_SET) != 0) {
    return IoError(path_ + ": cannot seek to the start: " + errno_text() +
                   "; hint: the reader needs a regular file, not a pipe");
  }
  std::clearerr(file_.get());
  begin_ = end_ = 0;
  eof_ = false;
  stats_ = CriteoStats();
  return OkStatus();
}

}  // namespace cann::recsys

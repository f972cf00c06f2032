// Line prefixing that understands the carriage-return redraw.
#include "elastic/output_forwarder.h"

namespace cann::elastic {

void OutputForwarder::write(std::string_view bytes) {
  constexpr std::string_view kRedraw = "\r\033[K";
  std::string out;
  out.reserve(bytes.size() + 32);
  auto emit = [&](char c) {
    if (at_line_start_ && c != '\n') {
      out += prefix_;
      at_line_start_ = false;
    }
    out += c;
    if (c == '\n') at_line_start_ = true;
  };
  for (char c : bytes) {
    if (!pending_escape_.empty()) {
      std::string candidate = pending_escape_;
      candidate.push_back(c);
      if (kRedraw.substr(0, candidate.size()) == candidate) {
        pending_escape_ = candidate;
        if (candidate.size() == kRedraw.size()) {
          out += candidate;
          out += prefix_;
          pending_escape_.clear();
          at_line_start_ = false;
        }
        continue;
      }
      // Not a redraw after all: what was held back is ordinary text.
      for (char h : pending_escape_) emit(h);
      pending_escape_.clear();
    }
    if (c == '\r') {
      pending_escape_.assign(1, '\r');
      continue;
    }
    emit(c);
  }
  std::fwrite(out.data(), 1, out.size(), out_);
  std::fflush(out_);
}

void OutputForwarder::finish() {
  pending_escape_.clear();
  if (!at_line_start_) {
    std::fputc('\n', out_);
    at_line_start_ = true;
  }
  std::fflush(out_);
}

}  // namespace cann::elastic

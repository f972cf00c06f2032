// Forwards a worker's output to the agent's terminal with "[rank N] " at the start of every
// line. A line redrawn in place ("\r\033[K...", the progress line on a terminal) counts as a new
// line, so the redraw keeps working with the prefix.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace cann::elastic {

class OutputForwarder {
 public:
  OutputForwarder(FILE* out, std::string prefix) : out_(out), prefix_(std::move(prefix)) {}
  void write(std::string_view bytes);
  // A worker that keeps its process into a generation where it has another rank.
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  // Ends a partial last line (the worker died mid-line).
  void finish();

 private:
  FILE* out_;
  std::string prefix_;
  bool at_line_start_ = true;
  std::string pending_escape_;  // a "\r" waiting to see whether "\033[K" follows
};

}  // namespace cann::elastic

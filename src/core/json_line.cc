// JsonLine implementation.
#include "core/json_line.h"

#include <cmath>
#include <cstdio>

namespace cann {

std::string JsonLine::escape(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

void JsonLine::key(std::string_view k) {
  if (!body_.empty()) body_ += ",";
  body_ += escape(k);
  body_ += ":";
}

JsonLine& JsonLine::add(std::string_view k, double v) {
  key(k);
  if (!std::isfinite(v)) {
    body_ += "null";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.15g", v);
    body_ += buf;
  }
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, int64_t v) {
  key(k);
  body_ += std::to_string(v);
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, std::string_view v) {
  key(k);
  body_ += escape(v);
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, bool v) {
  key(k);
  body_ += v ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, const std::vector<int64_t>& values) {
  key(k);
  body_ += "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) body_ += ",";
    body_ += std::to_string(values[i]);
  }
  body_ += "]";
  return *this;
}

JsonLine& JsonLine::add_raw(std::string_view k, std::string_view json) {
  key(k);
  body_ += json;
  return *this;
}

}  // namespace cann

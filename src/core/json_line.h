// JsonLine: builds one flat JSON object as a string, for JSONL logs and events, without pulling
// a JSON library into every header. Keys are added in order; strings are escaped; non-finite
// numbers become null (JSON has no NaN).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cann {

class JsonLine {
 public:
  JsonLine& add(std::string_view key, double value);
  JsonLine& add(std::string_view key, int64_t value);
  JsonLine& add(std::string_view key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonLine& add(std::string_view key, std::string_view value);
  JsonLine& add(std::string_view key, const char* value) {
    return add(key, std::string_view(value));
  }
  JsonLine& add(std::string_view key, bool value);
  JsonLine& add(std::string_view key, const std::vector<int64_t>& values);
  // `json` must already be valid JSON (an object or array built elsewhere).
  JsonLine& add_raw(std::string_view key, std::string_view json);
  std::string str() const { return "{" + body_ + "}"; }

  static std::string escape(std::string_view s);

 private:
  void key(std::string_view k);
  std::string body_;
};

}  // namespace cann

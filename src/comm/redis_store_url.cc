// Parsing of redis:// store URLs, kept apart from the connection code so it can be tested
// without a server. The password is decoded here and never printed: every message uses
// RedisUrl::address(), which leaves it out.
#include <charconv>

#include "comm/store_backends.h"

namespace cann::comm {
namespace {

bool parse_int(std::string_view s, int* out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && ptr == s.data() + s.size();
}

// %XX escapes (a password may contain '@', '/' or ':' that way).
bool percent_decode(std::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      *out += in[i];
      continue;
    }
    int v = 0;
    if (i + 2 >= in.size()) return false;
    auto [ptr, ec] = std::from_chars(in.data() + i + 1, in.data() + i + 3, v, 16);
    if (ec != std::errc() || ptr != in.data() + i + 3) return false;
    *out += static_cast<char>(v);
    i += 2;
  }
  return true;
}

}  // namespace

std::string RedisUrl::address() const {
  std::string a = "redis://";
  const bool v6 = host.find(':') != std::string::npos;
  if (v6) a.push_back('[');
  a.append(host);
  if (v6) a.push_back(']');
  a.append(":").append(std::to_string(port));
  if (db != 0) a.append("/").append(std::to_string(db));
  return a;
}

StatusOr<RedisUrl> parse_redis_url(const std::string& url) {
  // The error never echoes the URL: it may hold a password.
  auto bad = [](const std::string& what) {
    return InvalidArgument("bad redis store URL (" + what +
                           "); hint: redis://[:PASSWORD@]HOST[:PORT][/DB]");
  };
  constexpr std::string_view kScheme = "redis://";
  if (url.compare(0, kScheme.size(), kScheme) != 0) return bad("it must start with redis://");
  std::string_view rest(url);
  rest.remove_prefix(kScheme.size());
  RedisUrl u;
  // The last '@' ends the credentials: a raw '@' in a password still parses.
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view cred = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    const size_t colon = cred.find(':');
    const std::string_view user = colon == std::string_view::npos ? "" : cred.substr(0, colon);
    const std::string_view pass = colon == std::string_view::npos ? cred : cred.substr(colon + 1);
    if (!percent_decode(user, &u.user) || !percent_decode(pass, &u.password))
      return bad("malformed %XX escape in the credentials");
  }
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!parse_int(db, &u.db) || u.db < 0)) return bad("database is not a number");
    rest = rest.substr(0, slash);
  }
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unclosed [ in the host");
    u.host = std::string(rest.substr(1, close - 1));
    const std::string_view tail = rest.substr(close + 1);
    if (!tail.empty()) {
      if (tail.front() != ':') return bad("junk after ]");
      port = tail.substr(1);
    }
  } else {
    const size_t colon = rest.find(':');
    u.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port = rest.substr(colon + 1);
  }
  if (u.host.empty()) return bad("no host");
  if (!port.empty() && (!parse_int(port, &u.port) || u.port <= 0 || u.port > 65535))
    return bad("port is not a number in 1..65535");
  return u;
}

}  // namespace cann::comm

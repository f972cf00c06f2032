// RedisStore: the store for jobs that span machines (--rdzv redis://[:PASSWORD@]HOST[:PORT][/DB]).
// One hiredis connection per store object, guarded by one mutex (hiredis contexts are not
// thread-safe); commands are binary-safe (redisCommandArgv), so values may hold any bytes.
//
//   set / get / remove  SET / GET / DEL; get and wait poll (GET, EXISTS) with a backoff capped at
//                       50 ms, so a thousand waiting ranks cost the server ~20k cheap requests/s
//                       at worst, and a waiter never holds the connection between polls.
//   add                 INCRBY: atomic on the server.
//   compare_set         a five-line Lua script (EVAL): atomic on the server, one round trip.
//
// Failures: connecting and every command are bounded by the open_store timeout (socket
// timeouts). A dropped connection is re-established once per command: before sending, a
// connection that is readable while idle (the server closed it or restarted) is replaced; after
// a failed round trip, idempotent commands reconnect and retry once, while INCRBY does not (the
// server may have applied it) and reports that. Errors name redis://HOST:PORT/DB, never the
// password.
#include <hiredis/hiredis.h>
#include <poll.h>

#include <mutex>

#include "comm/store_backends.h"

namespace cann::comm {
namespace {

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextFree>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

// KEYS[1]; ARGV = {has_expected ("1"/"0"), expected, desired}. Returns the value after the call
// (nil when the key stays absent).
constexpr const char* kCompareSetScript = R"(local v = redis.call('GET', KEYS[1])
local match = (ARGV[1] == '1' and v == ARGV[2]) or (ARGV[1] == '0' and v == false)
if match then redis.call('SET', KEYS[1], ARGV[3]) return ARGV[3] end
return v)";

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

class RedisStore final : public Store {
 public:
  RedisStore(RedisUrl url, std::chrono::milliseconds timeout)
      : url_(std::move(url)), address_(url_.address()), timeout_(timeout) {}

  Status connect() {
    std::lock_guard<std::mutex> lock(mutex_);
    return connect_locked();
  }

  Status set(const std::string& key, std::string_view value) override {
    return run({"SET", key, std::string(value)}, true).status();
  }

  StatusOr<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override {
    PollBackoff backoff(timeout, std::chrono::milliseconds(50));
    do {
      CANN_ASSIGN_OR_RETURN(auto v, try_get(key));
      if (v) return std::move(*v);
    } while (backoff.sleep());
    return missing_keys_error(address_, {key}, timeout);
  }

  StatusOr<std::optional<std::string>> try_get(const std::string& key) override {
    CANN_ASSIGN_OR_RETURN(ReplyPtr r, run({"GET", key}, true));
    if (r->type == REDIS_REPLY_NIL) return std::optional<std::string>();
    if (r->type != REDIS_REPLY_STRING) return unexpected("GET", key);
    return std::optional<std::string>(std::string(r->str, r->len));
  }

  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    CANN_ASSIGN_OR_RETURN(ReplyPtr r, run({"INCRBY", key, std::to_string(delta)}, false));
    if (r->type != REDIS_REPLY_INTEGER) return unexpected("INCRBY", key);
    return static_cast<int64_t>(r->integer);
  }

  StatusOr<std::string> compare_set(const std::string& key,
                                    const std::optional<std::string>& expected,
                                    std::string_view desired) override {
    CANN_ASSIGN_OR_RETURN(ReplyPtr r,
                          run({"EVAL", kCompareSetScript, "1", key, expected ? "1" : "0",
                               expected.value_or(""), std::string(desired)},
                              true));
    if (r->type == REDIS_REPLY_NIL) return std::string();
    if (r->type != REDIS_REPLY_STRING) return unexpected("EVAL", key);
    return std::string(r->str, r->len);
  }

  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    if (keys.empty()) return OkStatus();
    std::vector<std::string> args = {"EXISTS"};
    args.insert(args.end(), keys.begin(), keys.end());
    PollBackoff backoff(timeout, std::chrono::milliseconds(50));
    do {
      // EXISTS counts a key once per mention, so duplicates in `keys` still add up.
      CANN_ASSIGN_OR_RETURN(ReplyPtr r, run(args, true));
      if (r->type != REDIS_REPLY_INTEGER) return unexpected("EXISTS", keys[0]);
      if (static_cast<size_t>(r->integer) == keys.size()) return OkStatus();
    } while (backoff.sleep());
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      CANN_ASSIGN_OR_RETURN(ReplyPtr r, run({"EXISTS", k}, true));
      if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) missing.push_back(k);
    }
    return missing_keys_error(address_, missing, timeout);
  }

  StatusOr<bool> remove(const std::string& key) override {
    CANN_ASSIGN_OR_RETURN(ReplyPtr r, run({"DEL", key}, true));
    if (r->type != REDIS_REPLY_INTEGER) return unexpected("DEL", key);
    return r->integer > 0;
  }

  std::string address() const override { return address_; }

 private:
  Status unexpected(const char* command, const std::string& key) const {
    return IoError("unexpected reply from " + address_ + " to " + command + " '" + key + "'");
  }

  // (Re)connects, authenticates and selects the database. mutex_ must be held.
  Status connect_locked() {
    ctx_.reset(redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(timeout_)));
    if (!ctx_ || ctx_->err) {
      const std::string why = ctx_ ? ctx_->errstr : "out of memory";
      ctx_.reset();
      return IoError("cannot connect to " + address_ + ": " + why +
                     "; hint: check that redis-server runs there and is reachable from this "
                     "machine (--rdzv)");
    }
    redisSetTimeout(ctx_.get(), to_timeval(timeout_));
    redisEnableKeepAlive(ctx_.get());
    if (!url_.password.empty()) {
      std::vector<std::string> auth = {"AUTH"};
      if (!url_.user.empty()) auth.push_back(url_.user);
      auth.push_back(url_.password);
      auto r = send_locked(auth);
      if (!r.ok()) return r.status();
      if ((*r)->type == REDIS_REPLY_ERROR)
        return reject("rejected the password", (*r)->str, "check the password in the URL");
    }
    if (url_.db != 0) {
      auto r = send_locked({"SELECT", std::to_string(url_.db)});
      if (!r.ok()) return r.status();
      if ((*r)->type == REDIS_REPLY_ERROR)
        return reject("refused database " + std::to_string(url_.db), (*r)->str,
                      "use a database number the server has (0..15 by default)");
    }
    return OkStatus();
  }

  Status reject(const std::string& what, const char* reply, const std::string& hint) {
    ctx_.reset();
    return IoError(address_ + " " + what + " (" + reply + "); hint: " + hint);
  }

  // One round trip; a null reply means the connection failed, and it is dropped.
  StatusOr<ReplyPtr> send_locked(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    ReplyPtr r(static_cast<redisReply*>(
        redisCommandArgv(ctx_.get(), static_cast<int>(args.size()), argv.data(), lens.data())));
    if (!r) {
      const std::string why = ctx_->errstr;
      ctx_.reset();
      return IoError("lost connection to " + address_ + " during " + args[0] + ": " + why);
    }
    return r;
  }

  // A connection with bytes (or EOF) to read while no command is in flight is dead: the
  // server closed it, restarted, or timed it out.
  bool idle_connection_is_stale() const {
    pollfd p{ctx_->fd, POLLIN, 0};
    return ::poll(&p, 1, 0) != 0;
  }

  StatusOr<ReplyPtr> run(const std::vector<std::string>& args, bool idempotent) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string lost;  // why the connection in use was dropped, if it was
    if (ctx_ && idle_connection_is_stale()) {
      ctx_.reset();
      lost = "lost connection to " + address_ + ": the server closed it";
    }
    for (int attempt = 0;; ++attempt) {
      if (!ctx_) {
        // Reconnect once; if that fails too, report both.
        Status s = connect_locked();
        if (!s.ok())
          return lost.empty() ? s : IoError(lost + "; reconnecting failed: " + s.message());
      }
      auto r = send_locked(args);
      if (r.ok()) return check_reply(std::move(*r), args);
      if (!idempotent)
        return IoError(r.status().message() +
                       "; the increment may or may not have been applied; hint: the store "
                       "reconnects on the next call");
      if (attempt == 1 || !lost.empty()) return r.status();
      lost = r.status().message();
    }
  }

  // Error replies become errors that say what to do.
  StatusOr<ReplyPtr> check_reply(ReplyPtr r, const std::vector<std::string>& args) {
    if (r->type != REDIS_REPLY_ERROR) return r;
    const std::string msg(r->str, r->len);
    if (msg.rfind("NOAUTH", 0) == 0)
      return IoError(address_ + " requires a password (" + msg +
                     "); hint: redis://:PASSWORD@HOST:PORT");
    // Protected mode: a server without a password answers every command from another host
    // with a long DENIED paragraph and closes the connection.
    if (msg.rfind("DENIED", 0) == 0)
      return IoError(address_ +
                     " takes commands only from its own machine (Redis protected mode: no "
                     "password is set); hint: start redis-server with --requirepass PASSWORD "
                     "and give redis://:PASSWORD@HOST:PORT, or --protected-mode no on a network "
                     "you trust");
    if (args[0] == "INCRBY" && msg.find("not an integer") != std::string::npos)
      return InvalidArgument("key '" + args[1] + "' in store " + address_ +
                             " holds a value that is not an integer; add() needs a counter key");
    return IoError(address_ + " refused " + args[0] + ": " + msg);
  }

  const RedisUrl url_;
  const std::string address_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;  // guards ctx_: one command at a time on the connection
  ContextPtr ctx_;
};

}  // namespace

StatusOr<std::shared_ptr<Store>> open_redis_store(const std::string& url,
                                                  std::chrono::milliseconds timeout) {
  CANN_ASSIGN_OR_RETURN(RedisUrl parsed, parse_redis_url(url));
  ignore_sigpipe();
  auto store = std::make_shared<RedisStore>(std::move(parsed), timeout);
  CANN_RETURN_IF_ERROR(store->connect());
  return std::shared_ptr<Store>(std::move(store));
}

}  // namespace cann::comm

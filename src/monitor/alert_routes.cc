// The webhook and email routes (see alert_routes.h).
#include "monitor/alert_routes.h"

#include <fcntl.h>
#include <httplib.h>
#include <openssl/x509.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/timer.h"

extern char** environ;

namespace cann::monitor {
namespace {

// A route's writes to a peer that may be gone (a sendmail that exits before reading, a TLS
// server that closes) fail with EPIPE instead of ending the process, whatever thread delivers:
// SIGPIPE is blocked for this thread while the object lives, and one that its writes raised is
// taken back before the thread's own mask returns.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
    was_pending_ = pending();
  }
  ~SigpipeBlocked() {
    if (!was_pending_ && pending()) {
      const timespec now{};
      while (sigtimedwait(&pipe_, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  static bool pending() {
    sigset_t set;
    sigpending(&set);
    return sigismember(&set, SIGPIPE) == 1;
  }
  sigset_t pipe_, previous_;
  bool was_pending_ = false;
};

struct ParsedUrl {
  std::string scheme_host_port;  // "https://host:8443"
  std::string path;              // "/hook", "/" when none
};

// http(s)://HOST[:PORT][/PATH]. Returns an error line, or "".
std::string parse_webhook_url(const std::string& url, ParsedUrl* out) {
  const char* usage = "expected http://HOST[:PORT]/PATH or https://HOST[:PORT]/PATH";
  std::string scheme;
  for (const char* s : {"http://", "https://"})
    if (url.rfind(s, 0) == 0) scheme = s;
  if (scheme.empty()) return usage;
  for (char c : url)
    if (c <= ' ' || c == 0x7f) return std::string(usage) + " without spaces or control characters";
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  const std::string host_port = rest.substr(0, slash);
  const size_t colon = host_port.rfind(':');
  const std::string host = host_port.substr(0, colon);
  if (host.empty() || host_port.find('@') != std::string::npos) return usage;
  if (colon != std::string::npos) {
    const std::string port = host_port.substr(colon + 1);
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 1 || p > 65535)
      return "port '" + port + "' is not a number from 1 to 65535";
  }
  if (out) *out = {scheme + host_port, slash == std::string::npos ? "/" : rest.substr(slash)};
  return "";
}

std::string http_error_text(httplib::Error e, long verify_result) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "no reply";
    case httplib::Error::Write:
      return "cannot send";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLLoadingCerts:
      return "cannot load the CA certificates";
    case httplib::Error::SSLServerVerification:
      return std::string("the server's certificate did not verify (") +
             X509_verify_cert_error_string(verify_result) +
             "); hint: --alert-webhook-ca FILE for a private CA";
    default:
      return "request failed (" + httplib::to_string(e) + ")";
  }
}

class WebhookRoute : public AlertRoute {
 public:
  WebhookRoute(const AlertRoutesConfig& c, const std::string& webhook, ParsedUrl url, bool slack)
      : shown_(url.scheme_host_port + (url.path == "/" ? "/" : "/...")),
        path_(url.path),
        slack_(slack),
        client_(url.scheme_host_port) {
    const auto t = std::chrono::duration<double>(c.timeout_s);
    client_.set_connection_timeout(t);
    client_.set_read_timeout(t);
    client_.set_write_timeout(t);
    client_.enable_server_certificate_verification(true);
    if (!c.webhook_ca.empty() && webhook.rfind("https://", 0) == 0)
      client_.set_ca_cert_path(c.webhook_ca);
  }

  // The path is left out: chat services put the webhook's secret there.
  std::string name() const override { return "webhook " + shown_; }

  Status deliver(const AlertMessage& m) override {
    const std::string body = slack_ ? slack_webhook_body(m) : generic_webhook_body(m);
    const SigpipeBlocked blocked;
    auto res = client_.Post(path_, body, "application/json");
    if (!res) return FailedPrecondition(http_error_text(res.error(), verify_result()));
    if (res->status >= 300) return FailedPrecondition("HTTP " + std::to_string(res->status));
    return OkStatus();
  }

 private:
  long verify_result() const { return client_.get_openssl_verify_result(); }

  const std::string shown_;
  const std::string path_;
  const bool slack_;
  httplib::Client client_;
};

// Runs `sendmail -t` with the message on its stdin, within the timeout.
class EmailRoute : public AlertRoute {
 public:
  explicit EmailRoute(const AlertRoutesConfig& c)
      : to_(c.email), sendmail_(c.sendmail), timeout_s_(c.timeout_s) {}

  std::string name() const override { return "email " + to_; }

  Status deliver(const AlertMessage& m) override {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
    std::string prog = sendmail_;
    std::string flag = "-t";
    char* argv[] = {prog.data(), flag.data(), nullptr};
    pid_t pid = -1;
    const int err = posix_spawn(&pid, sendmail_.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[0]);
    if (err != 0) {
      close(fds[1]);
      return IoError(sendmail_ + ": cannot start: " + std::strerror(err));
    }
    // A sendmail that exits before reading its input makes this write fail with EPIPE, reported
    // through its exit status below.
    const std::string mail = alert_email(to_, m);
    {
      const SigpipeBlocked blocked;
      for (size_t off = 0; off < mail.size();) {
        const ssize_t n = write(fds[1], mail.data() + off, mail.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
    }
    close(fds[1]);
    int status = 0;
    const double deadline = now_seconds() + timeout_s_;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (now_seconds() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return FailedPrecondition(sendmail_ + " did not finish within " +
                                  std::to_string(static_cast<int>(timeout_s_)) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return OkStatus();
    return FailedPrecondition(sendmail_ + " " +
                              (WIFEXITED(status)
                                   ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                   : "was killed by signal " + std::to_string(WTERMSIG(status))));
  }

 private:
  const std::string to_;
  const std::string sendmail_;
  const double timeout_s_;
};

std::string one_line(const AlertMessage& m) {
  std::string line = "cann-train job " + m.job;
  if (m.rank >= 0) line += " rank " + std::to_string(m.rank);
  line += ": " + m.text;
  // One line: a newline in a mail header would start a header of its own.
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  return line;
}

}  // namespace

Status check_alert_routes(const AlertRoutesConfig& c) {
  bool https = false;
  for (const std::string& w : c.webhooks) {
    if (const std::string bad = parse_webhook_url(w, nullptr); !bad.empty())
      return InvalidArgument("--alert-webhook '" + w + "': " + bad +
                             "; hint: give the receiver's http(s) URL, as its service shows it");
    https |= w.rfind("https://", 0) == 0;
  }
  for (const std::string& f : c.webhook_formats)
    if (f != "generic" && f != "slack")
      return InvalidArgument("--alert-webhook-format '" + f +
                             "': expected generic or slack; hint: slack for Slack, Mattermost "
                             "or Rocket.Chat incoming webhooks, generic for anything else");
  const size_t formats = c.webhook_formats.size();
  if (formats > 1 && formats != c.webhooks.size())
    return InvalidArgument("--alert-webhook-format given " + std::to_string(formats) +
                           " times for " + std::to_string(c.webhooks.size()) +
                           " webhooks; hint: give one format for all, or one per "
                           "--alert-webhook, in the same order");
  if (!c.webhook_ca.empty()) {
    if (!https)
      return InvalidArgument(
          "--alert-webhook-ca needs an https:// --alert-webhook; hint: drop "
          "it, or give the webhook's https URL");
    if (!std::ifstream(c.webhook_ca).good())
      return InvalidArgument("--alert-webhook-ca '" + c.webhook_ca +
                             "': cannot read the file; hint: give a PEM file of the CA that "
                             "signed the webhook's certificate");
  }
  if (!c.email.empty()) {
    const size_t at = c.email.find('@');
    bool plain = at != std::string::npos && at > 0 && at + 1 < c.email.size();
    for (char ch : c.email) plain &= ch > ' ' && ch != 0x7f && ch != ',' && ch != '<';
    if (!plain)
      return InvalidArgument("--alert-email '" + c.email +
                             "': expected one address, user@host, without spaces; hint: give "
                             "--alert-email once per run, to a list address for several people");
    if (access(c.sendmail.c_str(), X_OK) != 0)
      return InvalidArgument("--alert-sendmail '" + c.sendmail +
                             "': not an executable program; hint: install an MTA that "
                             "provides sendmail, or name one with --alert-sendmail PATH");
  }
  return OkStatus();
}

std::vector<std::unique_ptr<AlertRoute>> make_alert_routes(const AlertRoutesConfig& c) {
  std::vector<std::unique_ptr<AlertRoute>> routes;
  for (size_t i = 0; i < c.webhooks.size(); ++i) {
    ParsedUrl url;
    if (!parse_webhook_url(c.webhooks[i], &url).empty()) continue;
    const auto& f = c.webhook_formats;
    const bool slack = !f.empty() && f[f.size() == 1 ? 0 : i] == "slack";
    routes.push_back(std::make_unique<WebhookRoute>(c, c.webhooks[i], url, slack));
  }
  if (!c.email.empty()) routes.push_back(std::make_unique<EmailRoute>(c));
  return routes;
}

std::string generic_webhook_body(const AlertMessage& m) {
  return nlohmann::json{{"alert", m.text}, {"rank", m.rank}, {"time", m.time}, {"job", m.job}}
      .dump();
}

std::string slack_webhook_body(const AlertMessage& m) {
  const std::string line = one_line(m);
  nlohmann::json section = {{"type", "section"},
                            {"text", {{"type", "plain_text"}, {"text", line}}}};
  return nlohmann::json{{"text", line}, {"blocks", nlohmann::json::array({section})}}.dump();
}

std::string alert_email(const std::string& to, const AlertMessage& m) {
  // The subject is the line cut to a length mail clients show whole; the body has all of it.
  std::string subject = one_line(m);
  if (subject.size() > 100) subject = subject.substr(0, 97) + "...";
  char when[64] = "";
  const std::time_t t = static_cast<std::time_t>(m.time);
  std::tm tm{};
  if (gmtime_r(&t, &tm)) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
  std::string mail = "To: " + to + "\nSubject: " + subject +
                     "\nContent-Type: text/plain; charset=utf-8\n\n" + m.text + "\n\njob " + m.job +
                     ", rank " + std::to_string(m.rank) + ", " + when + "\n";
  return mail;
}

}  // namespace cann::monitor

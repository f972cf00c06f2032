// The routes that bring alerts to people: an https webhook verified against a private CA (and
// refused without it), the Slack-compatible body, the email through a sendmail stand-in, an
// unreachable receiver that costs one warning line and never the run, the refusals at start,
// and a two-process run whose forced alert reaches an https webhook, a Slack webhook and a
// mailbox together.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "monitor/alert_delivery.h"
#include "monitor/alert_routes.h"
#include "run_args.h"
#include "test_util.h"

namespace cann::monitor {
namespace {

// A receiver of POSTs on 127.0.0.1 (plain, or TLS with the given certificate and key).
class Receiver {
 public:
  Receiver(const std::string& cert = "", const std::string& key = "")
      : server_(cert.empty() ? std::make_unique<httplib::Server>()
                             : std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str())) {
    server_->Post("/hook", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      bodies_.push_back(req.body);
      res.set_content("ok", "text/plain");
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
  }
  ~Receiver() {
    server_->stop();
    thread_.join();
  }
  std::string url(const std::string& scheme) const {
    return scheme + "://127.0.0.1:" + std::to_string(port_) + "/hook";
  }
  // The bodies received, once `n` have come or after `timeout_s`.
  std::vector<std::string> wait_for(size_t n, double timeout_s = 20) {
    for (int i = 0; i < timeout_s * 50; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (bodies_.size() >= n) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }

 private:
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> bodies_;
};

// A self-signed certificate for 127.0.0.1 (dir/cert.pem, dir/key.pem).
void make_certificate(const test::TempDir& dir) {
  const auto r = test::run_command(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
       "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", dir.file("key.pem"),
       "-out", dir.file("cert.pem")},
      60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// sendmail stand-in: its arguments to ARGS, its stdin to MAIL.
std::string fake_sendmail(const test::TempDir& dir) {
  const std::string path = dir.file("sendmail");
  test::write_text(
      path, "#!/bin/sh\necho \"$@\" > " + dir.file("args") + "\ncat > " + dir.file("mail") + "\n");
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

AlertMessage message() {
  return {"loss spike at step 812: 3.41 vs median 2.27", 2, 1796230000, "j7"};
}

TEST(AlertRoutesTest, HttpsWebhookVerifiesAgainstAPrivateCa) {
  test::TempDir dir;
  ASSERT_NO_FATAL_FAILURE(make_certificate(dir));
  Receiver receiver(dir.file("cert.pem"), dir.file("key.pem"));
  AlertRoutesConfig c;
  c.webhooks = {receiver.url("https")};
  // Without the CA the system store does not know the certificate: refused.
  auto untrusted = make_alert_routes(c);
  ASSERT_EQ(untrusted.size(), 1u);
  const Status refused = untrusted[0]->deliver(message());
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("did not verify"), std::string::npos) << refused.message();
  EXPECT_TRUE(receiver.wait_for(1, 0.2).empty());
  c.webhook_ca = dir.file("cert.pem");
  ASSERT_TRUE(check_alert_routes(c).ok());
  {
    AlertDelivery delivery(make_alert_routes(c));
    delivery.send(message());
    ASSERT_EQ(receiver.wait_for(1).size(), 1u);
  }
  const auto j = nlohmann::json::parse(receiver.wait_for(1)[0]);
  EXPECT_EQ(j["alert"], message().text);
  EXPECT_EQ(j["job"], "j7");
  EXPECT_EQ(j["rank"], 2);
  EXPECT_EQ(j["time"], 1796230000);
}

TEST(AlertRoutesTest, SlackFormatSendsTheLineAsText) {
  Receiver receiver;
  AlertRoutesConfig c;
  c.webhooks = {receiver.url("http")};
  c.webhook_formats = {"slack"};
  auto routes = make_alert_routes(c);
  ASSERT_TRUE(routes[0]->deliver(message()).ok());
  const auto j = nlohmann::json::parse(receiver.wait_for(1).at(0));
  const std::string line = "cann-train job j7 rank 2: " + message().text;
  EXPECT_EQ(j["text"], line);
  EXPECT_EQ(j["blocks"][0]["type"], "section");
  EXPECT_EQ(j["blocks"][0]["text"]["text"], line);
  EXPECT_EQ(j.size(), 2u) << j.dump();
}

TEST(AlertRoutesTest, EmailGoesThroughSendmail) {
  test::TempDir dir;
  AlertRoutesConfig c;
  c.email = "oncall@example.com";
  c.sendmail = fake_sendmail(dir);
  ASSERT_TRUE(check_alert_routes(c).ok());
  auto routes = make_alert_routes(c);
  ASSERT_EQ(routes.size(), 1u);
  ASSERT_TRUE(routes[0]->deliver(message()).ok());
  EXPECT_EQ(test::read_text(dir.file("args")), "-t\n");
  const std::string mail = test::read_text(dir.file("mail"));
  EXPECT_EQ(mail.rfind("To: oncall@example.com\n", 0), 0u) << mail;
  EXPECT_NE(mail.find("\nSubject: cann-train job j7 rank 2: loss spike at step 812"),
            std::string::npos)
      << mail;
  // Headers end at the first empty line; the body carries the whole alert.
  const size_t body = mail.find("\n\n");
  ASSERT_NE(body, std::string::npos);
  EXPECT_NE(mail.find(message().text, body), std::string::npos) << mail;
  EXPECT_NE(mail.find("2026-12-02", body), std::string::npos) << mail;  // 1796230000 in UTC
  // A sendmail that fails is an error of the attempt.
  c.sendmail = "/bin/false";
  const Status failed = make_alert_routes(c)[0]->deliver(message());
  EXPECT_NE(failed.message().find("exited with status 1"), std::string::npos) << failed.message();
  // One that exits before reading breaks the pipe: the caller's thread, not blocking SIGPIPE
  // itself, survives (the default action would end the process), and no signal is left pending.
  for (int i = 0; i < 50; ++i) {
    const Status early = make_alert_routes(c)[0]->deliver(message());
    EXPECT_FALSE(early.ok());
  }
  sigset_t pending;
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);
}

TEST(AlertRoutesTest, UnreachableWebhookWarnsOnceAndDrops) {
  AlertRoutesConfig c;
  c.webhooks = {"http://127.0.0.1:" + std::to_string(test::free_tcp_port()) + "/hook"};
  Receiver mailbox;  // a second route that works: the dead one holds nothing back
  c.webhooks.push_back(mailbox.url("http"));
  DeliveryOptions o;
  o.retries = 2;
  o.first_backoff_s = 0.01;
  testing::internal::CaptureStderr();
  std::vector<AlertDelivery::Counts> counts;
  {
    AlertDelivery delivery(make_alert_routes(c), o);
    for (int i = 0; i < 5; ++i) delivery.send(message());
    EXPECT_EQ(mailbox.wait_for(5).size(), 5u);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    counts = delivery.counts();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (size_t at = err.find("alert route webhook"); at != std::string::npos;
       at = err.find("alert route webhook", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << err;
  EXPECT_NE(err.find("cannot connect; alerts are queued and retried, training goes on"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("/hook"), std::string::npos) << "the path may hold a secret: " << err;
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].delivered, 0);
  EXPECT_EQ(counts[0].failed_attempts, 15);  // 5 alerts x (1 + 2 retries)
  EXPECT_EQ(counts[0].dropped, 5);
  EXPECT_EQ(counts[1].delivered, 5);
}

AlertRoutesConfig routes(std::vector<std::string> webhooks, std::vector<std::string> formats = {},
                         std::string ca = "", std::string email = "",
                         std::string sendmail = "/usr/sbin/sendmail") {
  AlertRoutesConfig c;
  c.webhooks = std::move(webhooks);
  c.webhook_formats = std::move(formats);
  c.webhook_ca = std::move(ca);
  c.email = std::move(email);
  c.sendmail = std::move(sendmail);
  return c;
}

TEST(AlertRoutesTest, BadRoutesAreRefused) {
  const struct {
    AlertRoutesConfig c;
    const char* says;
  } cases[] = {
      {routes({"ftp://x"}), "expected http://HOST[:PORT]/PATH or https://"},
      {routes({"http:///hook"}), "expected http://"},
      {routes({"https://h:99999/x"}), "port '99999' is not a number from 1 to 65535"},
      {routes({"http://h/x"}, {"teams"}), "--alert-webhook-format 'teams': expected generic or"},
      {routes({"http://h/x"}, {"slack", "generic"}), "given 2 times for 1 webhooks"},
      {routes({"http://h/x"}, {}, "/etc/hostname"), "--alert-webhook-ca needs an https://"},
      {routes({"https://h/x"}, {}, "/nonexistent/ca.pem"), "cannot read the file"},
      {routes({}, {}, "", "oncall"), "--alert-email 'oncall': expected one address"},
      {routes({}, {}, "", "a@b", "/nonexistent/sendmail"), "not an executable program"},
  };
  for (const auto& k : cases) {
    const Status s = check_alert_routes(k.c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << k.says;
    EXPECT_NE(s.message().find(k.says), std::string::npos) << s.message();
  }
}

TEST(AlertRoutesTest, BadRouteFlagsExitTwoWithOneLine) {
  test::expect_run_usage_errors({{"--alert-webhook", "ftp://x"},
                                 {"--alert-webhook", "http://h/x", "--alert-webhook-format", "x"},
                                 {"--alert-email", "a@b", "--alert-sendmail", "/nonexistent"},
                                 {"--alert-webhook", "http://h/x"}});  // under --monitor off
}

// `cann-train run ARGS` with `env` added to the environment.
test::CommandResult run_with_env(const test::RunArgs& args, double timeout_s,
                                 const std::vector<std::string>& env) {
  std::vector<std::string> argv = {CANN_TRAIN_BINARY};
  argv.insert(argv.end(), args.args().begin(), args.args().end());
  return test::run_command(argv, timeout_s, env);
}

const char* kTinyGpt =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 1\n"
    "num_attention_heads: 2\nvocab_size: 256\nseq_length: 32\n";

TEST(AlertRoutesTest, UnreachableWebhookNeverStopsTraining) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kTinyGpt);
  test::RunArgs args;
  args.monitor("prometheus").model(dir.file("m.yaml")).steps(40).batch_size(4).seq_len(16);
  args.sample_tokens(0).eval_every(0).quiet();
  args.flag("--monitor-port", 0)
      .flag("--alert-webhook", "http://127.0.0.1:" + std::to_string(test::free_tcp_port()) + "/x");
  const auto r = run_with_env(args, 120, {"CANN_TRAIN_FAULT_ALERT=5"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("done: steps 1..40"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("alert: injected alert at step 5"), std::string::npos) << r.output;
  size_t warnings = 0;
  for (size_t at = r.output.find("alert route webhook"); at != std::string::npos;
       at = r.output.find("alert route webhook", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 1u) << r.output;
}

// Two workers under the agent; the agent's alert engine raises the forced alert and brings it
// to all three routes at once.
TEST(MultiProcAlertRoutesTest, ForcedAlertReachesEveryRoute) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kTinyGpt);
  ASSERT_NO_FATAL_FAILURE(make_certificate(dir));
  Receiver https(dir.file("cert.pem"), dir.file("key.pem"));
  Receiver slack;
  test::RunArgs args;
  args.monitor("prometheus").model(dir.file("m.yaml")).steps(30).batch_size(8).seq_len(16);
  args.sample_tokens(0).eval_every(0).quiet().nproc(2).flag("--monitor-port", 0);
  args.flags({"--alert-webhook", https.url("https"), "--alert-webhook-ca", dir.file("cert.pem"),
              "--alert-webhook", slack.url("http"), "--alert-webhook-format", "generic",
              "--alert-webhook-format", "slack", "--alert-email", "oncall@example.com",
              "--alert-sendmail", fake_sendmail(dir)});
  const auto r = run_with_env(args, 180, {"CANN_TRAIN_FAULT_ALERT=3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto generic = https.wait_for(1);
  ASSERT_EQ(generic.size(), 1u) << r.output;
  const auto j = nlohmann::json::parse(generic[0]);
  const std::string alert = j["alert"];
  EXPECT_EQ(alert.rfind("injected alert at step ", 0), 0u) << alert;
  const auto s = slack.wait_for(1);
  ASSERT_EQ(s.size(), 1u) << r.output;
  EXPECT_NE(nlohmann::json::parse(s[0])["text"].get<std::string>().find(alert), std::string::npos);
  const std::string mail = test::read_text(dir.file("mail"));
  EXPECT_NE(mail.find("To: oncall@example.com"), std::string::npos) << mail;
  EXPECT_NE(mail.find(alert), std::string::npos) << mail;
  std::printf("https webhook: %s\nslack webhook: %s\nmail:\n%s", generic[0].c_str(), s[0].c_str(),
              mail.c_str());
}

}  // namespace
}  // namespace cann::monitor

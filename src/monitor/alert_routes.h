// Where an alert goes besides the log and the hub: the routes that reach people.
//
//   - webhook: a JSON POST to an http:// or https:// URL. https verifies the server's
//     certificate and host name against the system's CA store, or against one PEM file
//     (AlertRoutesConfig::webhook_ca) for a private CA. Two bodies: "generic"
//     ({"alert", "rank", "time", "job"}) and "slack" ({"text": line, "blocks": [a section
//     with the same line]}, which Slack's incoming webhooks and the chat tools that copy them,
//     Mattermost and Rocket.Chat, accept);
//   - email: the message (To:, Subject:, the alert's line in the body) piped to
//     `sendmail -t`, which takes the recipient from the header; any MTA's sendmail works.
//
// check_alert_routes() refuses a bad URL, format, address or program before the run starts.
// A route's deliver() does one attempt with its own timeouts and says what went wrong; the
// retries, the queue and the warnings belong to AlertDelivery (alert_delivery.h).
//
// Thread safety: a route is used by one delivery thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::monitor {

struct AlertRoutesConfig {
  std::vector<std::string> webhooks;  // http(s)://HOST[:PORT][/PATH], one route each
  // generic | slack: one per webhook, in order, or one for all; none: generic.
  std::vector<std::string> webhook_formats;
  std::string webhook_ca;  // PEM file of a private CA for every https webhook; empty: the system's
  std::string email;       // recipient address; empty: none
  std::string sendmail = "/usr/sbin/sendmail";
  double timeout_s = 5.0;  // per attempt: connect, send, reply, or sendmail's run
};

// One line naming the flag and what to do (kInvalidArgument), or OK.
Status check_alert_routes(const AlertRoutesConfig& config);

struct AlertMessage {
  std::string text;  // the alert's line: "loss spike at step 812: ..."
  int rank = -1;
  double time = 0.0;  // Unix seconds
  std::string job;
};

class AlertRoute {
 public:
  virtual ~AlertRoute() = default;
  // "webhook https://host:8443/...", "email ops@example.com": names the route in warnings.
  virtual std::string name() const = 0;
  // One attempt. Errors: kFailedPrecondition (unreachable, TLS, an HTTP status of 300 or more,
  // sendmail's exit status or timeout) or kIoError (no pipe, sendmail cannot start), with a
  // line that says which; never an exception.
  virtual Status deliver(const AlertMessage& m) = 0;
};

// The routes `config` asks for (none when it names none). `config` passed check_alert_routes.
std::vector<std::unique_ptr<AlertRoute>> make_alert_routes(const AlertRoutesConfig& config);

// The bodies, for the routes and their tests.
std::string generic_webhook_body(const AlertMessage& m);
std::string slack_webhook_body(const AlertMessage& m);
std::string alert_email(const std::string& to, const AlertMessage& m);

}  // namespace cann::monitor

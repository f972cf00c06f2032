// The alert flags of `cann-train run` (sensitivity and the routes that reach people), kept
// apart from run_command.cc so that file stays about launching and training.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "train/config.h"

namespace cann::cli {

void add_run_alert_flags(CLI::App* run, train::TrainConfig* config) {
  const char* kMonitor = "Monitoring";
  monitor::AlertRoutesConfig& routes = config->alerts.routes;
  run->add_option("--alert-sensitivity", config->alerts.sensitivity,
                  "Anomaly detectors' sensitivity, 0 (fewest alerts) to 1 (most)")
      ->check(CLI::Range(0.0, 1.0))
      ->group(kMonitor)
      ->capture_default_str();
  // Each flag given again adds a route (one value per occurrence).
  run->add_option("--alert-webhook", routes.webhooks,
                  "POST every alert as JSON to this http:// or https:// URL (certificates are "
                  "verified against the system's CA store); may be given several times")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(kMonitor);
  run->add_option("--alert-webhook-ca", routes.webhook_ca,
                  "PEM file of the private CA that signed the https webhook's certificate")
      ->group(kMonitor);
  run->add_option("--alert-webhook-format", routes.webhook_formats,
                  "Webhook body: generic ({\"alert\",\"rank\",\"time\",\"job\"}, the "
                  "default) or slack ({\"text\": the alert's line, \"blocks\"}: Slack, "
                  "Mattermost, Rocket.Chat); one for all webhooks, or one per --alert-webhook "
                  "in order")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(kMonitor);
  run->add_option("--alert-email", routes.email,
                  "Mail every alert to this address through `sendmail -t`")
      ->group(kMonitor);
  run->add_option("--alert-sendmail", routes.sendmail, "The sendmail program --alert-email runs")
      ->group(kMonitor)
      ->capture_default_str();
}

}  // namespace cann::cli

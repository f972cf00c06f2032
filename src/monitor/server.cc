// HTTP routes of the monitoring server.
#include "monitor/server.h"

#include <httplib.h>

#include <chrono>
#include <random>
#include <thread>

#include "core/embedded.h"

namespace cann::monitor {
namespace {

std::string random_token() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

const char* content_type(const std::string& path) {
  if (path.ends_with(".html")) return "text/html; charset=utf-8";
  if (path.ends_with(".js")) return "application/javascript; charset=utf-8";
  if (path.ends_with(".css")) return "text/css; charset=utf-8";
  if (path.ends_with(".svg")) return "image/svg+xml";
  return "text/plain; charset=utf-8";
}

// The API answers go uncompressed: cpp-httplib compresses "application/json" bodies with brotli
// at its highest quality when the client accepts it, as browsers do, which took the agent 3-30
// ms a poll on the core that trains; with the charset named the type is not on its list. A
// poll's answer is a few kilobytes on a local or LAN link.
constexpr char kJson[] = "application/json; charset=utf-8";

}  // namespace

MonitorServer::MonitorServer(Hub& hub, ServerConfig config)
    : hub_(hub), config_(std::move(config)), server_(std::make_unique<httplib::Server>()) {
  if (config_.token.empty()) config_.token = random_token();
}

MonitorServer::~MonitorServer() {
  stop();
}

std::string MonitorServer::url() const {
  return "http://" + config_.bind + ":" + std::to_string(port_) + "/";
}

Status MonitorServer::start() {
  httplib::Server& s = *server_;
  // cpp-httplib sets SO_REUSEPORT by default, which lets a second server bind the same port
  // and split the traffic; a taken port must be an error (or a reason to try the next).
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });
  // One request a connection. cpp-httplib waits for a kept-alive connection's next request by
  // waking every 11 ms (a 10 ms select, then a 1 ms sleep) for up to 5 s; a dashboard polling
  // every second keeps its connections alive for good, so each of them woke a thread about 90
  // times a second on the cores that train (bench/monitor_overhead: +2.3% of the training's
  // CPU time with the dashboard open, +0.6% without keep-alive). A new connection a second
  // costs a handshake on a local or LAN link.
  s.set_keep_alive_max_count(1);
  if (config_.prometheus) {
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(hub_.prometheus_text(), "text/plain; version=0.0.4; charset=utf-8");
    });
  }
  if (config_.dashboard) {
    s.Get("/api/status", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(hub_.status_json(), kJson);
    });
    s.Get("/api/series", [this](const httplib::Request& req, httplib::Response& res) {
      const int rank = req.has_param("rank") ? std::atoi(req.get_param_value("rank").c_str()) : -1;
      const long long since =
          req.has_param("since") ? std::atoll(req.get_param_value("since").c_str()) : 0;
      res.set_content(hub_.series_json(rank, since), kJson);
    });
    s.Get("/api/events", [this](const httplib::Request& req, httplib::Response& res) {
      const size_t last = req.has_param("last")
                              ? std::strtoul(req.get_param_value("last").c_str(), nullptr, 10)
                              : 200;
      res.set_content(hub_.events_json(last), kJson);
    });
    s.Post("/api/stop", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.get_header_value("Authorization") != "Bearer " + config_.token) {
        res.status = 401;
        res.set_content("{\"error\":\"a valid token is required (Authorization: Bearer TOKEN)\"}",
                        kJson);
        return;
      }
      stop_requested_ = true;
      res.set_content("{\"stopping\":true}", kJson);
    });
    // Static dashboard files, compiled in from web/.
    s.Get(R"(/(.*))", [](const httplib::Request& req, httplib::Response& res) {
      std::string path = req.matches[1];
      if (path.empty()) path = "index.html";
      if (path.find("..") != std::string::npos) {
        res.status = 404;
        return;
      }
      auto file = embedded_file("web/" + path);
      if (!file) {
        res.status = 404;
        res.set_content("not found", "text/plain");
        return;
      }
      res.set_content(std::string(*file), content_type(path));
    });
  }
  int port = -1;
  if (config_.port == 0) {
    port = s.bind_to_any_port(config_.bind.c_str());
  } else {
    const int tries = config_.try_next_ports ? 100 : 1;
    for (int p = config_.port; p < config_.port + tries && port < 0; ++p)
      if (s.bind_to_port(config_.bind.c_str(), p)) port = p;
  }
  if (port < 0)
    return IoError("monitor: cannot listen on " + config_.bind + ":" +
                   std::to_string(config_.port) +
                   " (in use?); hint: pick another --monitor-port, or --monitor off");
  port_ = port;
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // cpp-httplib's stop() is a no-op until the listen loop runs, so a stop() right after start()
  // would leave the loop running forever: wait for it to be up.
  for (int i = 0; i < 5000 && !server_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return OkStatus();
}

void MonitorServer::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace cann::monitor

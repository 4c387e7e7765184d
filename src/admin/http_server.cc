#include "admin/http_server.h"

#include <httplib.h>

#include "base/log.h"

namespace pfsnet {

HttpServer::HttpServer(HttpRoutes routes)
    : routes_(std::move(routes)), server_(std::make_unique<httplib::Server>()) {
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(routes_.metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get(
      R"(/api/v1/([a-z_/]+))", [this](const httplib::Request& req, httplib::Response& res) {
        auto r = routes_.api(std::string(req.matches[1]), req.params);
        if (!r.ok()) {
          res.status = r.status().code() == Code::kNotFound ? 404 : 400;
          res.set_content("{\"error\": \"" + r.status().message() + "\"}\n", "application/json");
          return;
        }
        res.set_content(*r + "\n", "application/json");
      });
  server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("pfsnetd: see /metrics and /api/v1/{nis,peers,config,diag/rpc}\n",
                    "text/plain");
  });
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start(const std::string& address) {
  auto colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  int port = std::stoi(address.substr(colon + 1));
  if (!server_->bind_to_port(host.c_str(), port))
    return Status(Code::kInvalidArgument,
                  "cannot serve HTTP on " + address + " (address in use or not local)");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  PFS_LOG_INFO("HTTP on http://{}/metrics and /api/v1", address);
  return Status::Ok();
}

void HttpServer::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pfsnet

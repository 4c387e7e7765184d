#include "admin/http_server.h"

#include <httplib.h>

#include "base/log.h"
#include "base/thread_name.h"

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
  for (const WebFile& f : routes_.files) {
    server_->Get(std::string(f.path), [f](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(f.body.data(), f.body.size(), std::string(f.content_type));
    });
  }
  if (routes_.files.empty())
    server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("pfsnetd: see /metrics and /api/v1/{nis,peers,config,diag/rpc}\n",
                      "text/plain");
    });
}

HttpServer::~HttpServer() { stop(); }

namespace {

// Compares in time that does not depend on where the strings differ.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % (b.empty() ? 1 : b.size())];
  return b.empty() ? false : diff == 0;
}

}  // namespace

Status HttpServer::start(const std::string& address, const std::string& token) {
  if (!token.empty()) {
    server_->set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
      std::string given = req.get_header_value("Authorization");
      constexpr std::string_view kBearer = "Bearer ";
      if (given.rfind(kBearer, 0) == 0 && same_secret(given.substr(kBearer.size()), token))
        return httplib::Server::HandlerResponse::Unhandled;
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer realm=\"pfsnetd\"");
      res.set_content(given.empty() ? "{\"error\": \"this endpoint requires a token "
                                      "(Authorization: Bearer TOKEN)\"}\n"
                                    : "{\"error\": \"wrong token\"}\n",
                      "application/json");
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  auto colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  int port = std::stoi(address.substr(colon + 1));
  if (!server_->bind_to_port(host.c_str(), port))
    return Status(Code::kInvalidArgument,
                  "cannot serve HTTP on " + address + " (address in use or not local)");
  thread_ = std::thread([this] {
    name_this_thread("pfs-http");  // httplib's workers, started from it, inherit the name
    server_->listen_after_bind();
  });
  PFS_LOG_INFO("HTTP on http://{}/metrics and /api/v1{}", address,
               token.empty() ? "" : " (token required)");
  return Status::Ok();
}

void HttpServer::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pfsnet

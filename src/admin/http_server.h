// HttpServer: the daemon's read-only HTTP endpoint (node.http): GET /metrics (Prometheus
// text exposition format), GET /api/v1/... (the admin JSON) and the dashboard's files (GET /
// and /ui/...; admin/dashboard.h), on cpp-httplib. Pages are served with a
// Content-Security-Policy that lets them load nothing from elsewhere.
// Binds only the configured address (node.http: 127.0.0.1 unless a host is given); with a
// token (node.http_token_file), every request must carry "Authorization: Bearer TOKEN"
// or is answered 401. Threads: cpp-httplib's own pool; handlers must be
// thread-safe.
#pragma once

#include <pfsnet/status.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "admin/dashboard.h"

namespace httplib {
class Server;
}

namespace pfsnet {

struct HttpRoutes {
  // The /metrics body.
  std::function<std::string()> metrics;
  // /api/v1/NAME?query -> JSON text, or an error (400 with the message).
  std::function<Result<std::string>(const std::string& name,
                                    const std::multimap<std::string, std::string>& params)>
      api;
  // Static files (the dashboard); empty: GET / answers a line naming the endpoints.
  std::vector<WebFile> files;
};

class HttpServer {
 public:
  explicit HttpServer(HttpRoutes routes);
  ~HttpServer();

  // `address` is "HOST:PORT"; `token` empty: none required. Returns once listening (or
  // with the bind error).
  Status start(const std::string& address, const std::string& token = "");
  void stop();

 private:
  HttpRoutes routes_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace pfsnet

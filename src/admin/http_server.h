// HttpServer: the daemon's read-only HTTP endpoint (node.http): GET /metrics (Prometheus
// text exposition format) and GET /api/v1/... (the admin JSON), on cpp-httplib.
// Binds only the configured address. Threads: cpp-httplib's own pool; handlers must be
// thread-safe.
#pragma once

#include <pfsnet/status.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

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
};

class HttpServer {
 public:
  explicit HttpServer(HttpRoutes routes);
  ~HttpServer();

  // `address` is "HOST:PORT". Returns once listening (or with the bind error).
  Status start(const std::string& address);
  void stop();

 private:
  HttpRoutes routes_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace pfsnet

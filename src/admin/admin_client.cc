#include "admin/admin_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pfsnet {

Result<nlohmann::json> admin_request(const std::string& path, const nlohmann::json& req,
                                     std::chrono::milliseconds timeout,
                                     const std::function<void(const nlohmann::json&)>& on_event) {
  sockaddr_un sa{};
  if (path.size() >= sizeof(sa.sun_path))
    return Status(Code::kInvalidArgument, "socket path too long: " + path);
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.c_str(), path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    std::string why = std::strerror(errno);
    close(fd);
    return Status(Code::kUnreachable,
                  "cannot reach pfsnetd at " + path + " (" + why + "); is the daemon running?");
  }
  return admin_exchange(fd, req, timeout, on_event);
}

Result<nlohmann::json> admin_exchange(int fd, const nlohmann::json& req,
                                      std::chrono::milliseconds timeout,
                                      const std::function<void(const nlohmann::json&)>& on_event) {
  std::string s = req.dump() + "\n";
  // A daemon that refuses this peer answers and closes at once, maybe before the request is
  // sent: then the send fails, but the refusal is already waiting to be read, and it says
  // why far better than "closed" would.
  const bool sent = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  if (!sent) shutdown(fd, SHUT_WR);  // whatever it was, the daemon gets no half request
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string buf;
  char chunk[65536];
  for (;;) {
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception& e) {
        close(fd);
        return Status(Code::kProtocol, std::string("malformed answer from pfsnetd: ") + e.what());
      }
      if (j.contains("event")) {
        if (on_event) on_event(j);
        continue;
      }
      close(fd);
      if (j.value("ok", false)) return j.value("result", nlohmann::json::object());
      return Status(Code::kRemoteError, j.value("error", std::string("request failed")));
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      close(fd);
      return Status(Code::kTimeout, "no answer from pfsnetd within " +
                                        std::to_string(timeout.count() / 1000) + " s");
    }
    pollfd p{fd, POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      close(fd);
      return Status(Code::kClosed, sent ? "pfsnetd closed the admin connection without an answer"
                                        : "pfsnetd closed the admin connection");
    }
    buf.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace pfsnet

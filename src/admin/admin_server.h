// AdminServer: the daemon's owner-only UNIX socket: the file is mode 0600 and every
// connection's peer credentials (SO_PEERCRED) must be the daemon's own uid or root. Protocol: the
// client writes one JSON object on one line ({"cmd": NAME, ...}); the server answers with zero or
// more progress lines ({"event": ...}) and one final line, either {"ok": true, "result": ...} or
// {"ok": false, "error": MESSAGE}. One request per connection.
// Requests go through an AdminCommands table, so no input can end the daemon (see there).
// Threads: an accept thread plus one thread per session (at most kMaxSessions); the
// handler runs on the session thread and may block (deadlines are its own).
#pragma once

#include <pfsnet/status.h>

#include <atomic>
#include <functional>
#include <list>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "admin/admin_commands.h"
#include "base/mutex.h"

namespace pfsnet {

// Whether the process at the other end of UNIX socket `fd` may use the admin socket: its
// uid is this process's effective uid or root. The refusal names the uid.
Status admin_peer_allowed(int fd);

class AdminServer {
 public:
  static constexpr int kMaxSessions = 16;

  // `commands` must outlive the server.
  explicit AdminServer(const AdminCommands& commands) : commands_(commands) {}
  ~AdminServer() { stop(); }

  // Binds `path` (mode 0600, parent created 0755 if missing; a stale socket file is
  // replaced, a live one is an error) and starts accepting.
  Status start(const std::string& path);
  // Stops accepting, waits for sessions (each bounded by its own deadlines), removes the
  // socket file. Idempotent.
  void stop();

 private:
  void accept_loop();
  void session(int fd);

  const AdminCommands& commands_;
  std::string path_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread acceptor_;
  Mutex mu_;
  struct Session {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::list<Session> sessions_ GUARDED_BY(mu_);
  std::atomic<int> active_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace pfsnet

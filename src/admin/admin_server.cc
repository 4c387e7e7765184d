#include "admin/admin_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/log.h"
#include "base/mutex.h"
#include "base/thread_name.h"

namespace pfsnet {
namespace {

bool write_line(int fd, const nlohmann::json& j) {
  std::string s = admin_line(j) + "\n";
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Status AdminServer::start(const std::string& path) {
  path_ = path;
  sockaddr_un sa{};
  if (path.size() >= sizeof(sa.sun_path))
    return Status(Code::kInvalidArgument, "admin socket path too long: " + path);
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::exists(parent)) {
    std::filesystem::create_directories(parent, ec);
    if (ec)
      return Status(Code::kInvalidArgument,
                    "cannot create " + parent.string() + ": " + ec.message());
    chmod(parent.c_str(), 0755);
  }
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.c_str(), path.size());
  if (std::filesystem::exists(path)) {
    // Live daemon there? Then refuse; otherwise the file is stale.
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
    close(probe);
    if (live) return Status(Code::kInvalidArgument, "another daemon is serving " + path);
    unlink(path.c_str());
  }
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  mode_t old = umask(0177);
  int rc = bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  umask(old);
  if (rc != 0 || listen(listen_fd_, 16) != 0) {
    std::string why = std::strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return Status(Code::kInvalidArgument, "cannot bind admin socket " + path + ": " + why);
  }
  chmod(path.c_str(), 0600);
  if (pipe2(wake_, O_CLOEXEC) != 0) return Status(Code::kInternal, "pipe failed");
  acceptor_ = std::thread([this] {
    name_this_thread("pfs-admin");
    accept_loop();
  });
  return Status::Ok();
}

void AdminServer::stop() {
  if (stopping_.exchange(true)) return;
  if (wake_[1] >= 0) {
    char c = 1;
    (void)!write(wake_[1], &c, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  MutexLock lk(mu_);
  for (auto& s : sessions_)
    if (s.thread.joinable()) s.thread.join();
  sessions_.clear();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(path_.c_str());
  }
  for (int& fd : wake_)
    if (fd >= 0) close(fd);
  listen_fd_ = wake_[0] = wake_[1] = -1;
}

void AdminServer::accept_loop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    if (active_.load() >= kMaxSessions) {
      write_line(fd, {{"ok", false}, {"error", "daemon busy: too many admin sessions"}});
      close(fd);
      continue;
    }
    ++active_;
    MutexLock lk(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {  // reap finished sessions
      if (it->done.load()) {
        it->thread.join();
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
    Session& s = sessions_.emplace_back();
    s.thread = std::thread([this, fd, &s] {
      session(fd);
      --active_;
      s.done.store(true);
    });
  }
}

Status admin_peer_allowed(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return Status(Code::kRejected,
                  std::string("cannot read the peer's credentials: ") + std::strerror(errno));
  uid_t owner = geteuid();
  if (cred.uid == 0 || cred.uid == owner) return Status::Ok();
  return Status(Code::kRejected, "uid " + std::to_string(cred.uid) + " (pid " +
                                     std::to_string(cred.pid) +
                                     ") is not allowed on the admin socket (only uid " +
                                     std::to_string(owner) + " and root are)");
}

void AdminServer::session(int fd) {
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  // The socket file is 0600, but a mode can be changed (or the file reached through a
  // descriptor passed on): the kernel's word on who connected decides.
  if (Status ok = admin_peer_allowed(fd); !ok.ok()) {
    PFS_LOG_WARN_LIMITED("admin socket: refused peer", "admin socket: refused: {}", ok.message());
    write_line(fd, {{"ok", false}, {"error", ok.message()}});
    close(fd);
    return;
  }
  std::string line;
  char buf[4096];
  while (line.find('\n') == std::string::npos && line.size() < 65536) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      close(fd);
      return;
    }
    line.append(buf, static_cast<size_t>(n));
  }
  AdminEmit emit = [fd](const nlohmann::json& j) { return write_line(fd, j); };
  write_line(fd, commands_.handle_line(std::string_view(line).substr(0, line.find('\n')), emit));
  close(fd);
}

}  // namespace pfsnet

// AdminCommands: the table of admin commands a daemon serves ({"cmd": NAME, ...} ->
// result), and the one place a request line becomes a reply line. Nothing a client sends
// can end the daemon: a line that is not JSON, not UTF-8, not an object, names no known
// command, or makes a handler throw becomes {"ok": false, "error": ...}; replies are
// rendered with invalid UTF-8 replaced, never thrown on.
// Threads: add() before serving; dispatch() and handle_line() from any thread at once.
#pragma once

#include <pfsnet/status.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pfsnet {

// Sends one progress line to the client; returns false once the client has gone.
using AdminEmit = std::function<bool(const nlohmann::json&)>;
// Handles a request; returns the result or an error. May block (its deadlines are its
// own) and may throw: dispatch() turns an exception into an error reply.
using AdminHandler =
    std::function<Result<nlohmann::json>(const nlohmann::json& req, const AdminEmit& emit)>;

// One JSON line as it goes on the wire: compact, invalid UTF-8 replaced by U+FFFD.
std::string admin_line(const nlohmann::json& j);

class AdminCommands {
 public:
  // `http`: also served read-only as GET /api/v1/<http path> (its query parameters become
  // the request's fields). REQUIRES: `name` not added before.
  void add(std::string name, AdminHandler h, std::string http_path = {});

  // Runs the command `req["cmd"]` names. Never throws.
  Result<nlohmann::json> dispatch(const nlohmann::json& req, const AdminEmit& emit) const noexcept;
  // A request line (without its newline) -> the final reply object, {"ok": true, "result":
  // ...} or {"ok": false, "error": MESSAGE}. Progress lines go to `emit`. Never throws.
  nlohmann::json handle_line(std::string_view line, const AdminEmit& emit) const noexcept;
  // GET /api/v1/<path>: the command registered for it, with `params` as fields.
  Result<nlohmann::json> http_get(const std::string& path,
                                  const std::multimap<std::string, std::string>& params) const;

  std::vector<std::string> names() const;

 private:
  std::map<std::string, AdminHandler, std::less<>> handlers_;
  std::map<std::string, std::string, std::less<>> http_;  // http path -> command
};

}  // namespace pfsnet

// admin_request: the CLI side of the admin socket. Sends one request and reads lines
// until the final one, passing progress lines to `on_event`. Every read has a deadline.
// Thread safety: a free function; no shared state.
#pragma once

#include <pfsnet/status.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace pfsnet {

Result<nlohmann::json> admin_request(
    const std::string& socket_path, const nlohmann::json& req, std::chrono::milliseconds timeout,
    const std::function<void(const nlohmann::json&)>& on_event = {});

// The same over a connected stream socket `fd`, which it closes. A refusal the daemon wrote
// before closing is read and returned even when the request could not be sent.
Result<nlohmann::json> admin_exchange(
    int fd, const nlohmann::json& req, std::chrono::milliseconds timeout,
    const std::function<void(const nlohmann::json&)>& on_event = {});

}  // namespace pfsnet

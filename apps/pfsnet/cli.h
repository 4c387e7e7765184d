// The pfsnet CLI's shared pieces: the invocation (socket, --json, exit status), one
// request helper, and the output helpers every subcommand uses. Each subcommand lives in
// its own add_* function: it declares its options on a CLI11 subcommand and sets a
// callback that runs it.
// Exit status: 0 success, 1 the operation ran but failed (e.g. a ping got no reply),
// 2 a bad argument or no daemon.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace pfsnet::cli {

using nlohmann::json;

struct Invocation {
  std::string socket;  // the local daemon's admin socket
  bool json = false;   // --json: print the daemon's JSON as it is
  int rc = 0;          // the exit status the subcommand chose
};

// "pfsnet: MSG" on stderr; returns 2.
int fail(const std::string& msg);
// Sends `req` to the daemon; prints the JSON result with --json, else calls `human`.
// Returns 0, or 2 with the daemon's error on stderr. `on_event` sees progress lines.
int request(const Invocation& inv, const json& req, std::chrono::milliseconds timeout,
            const std::function<void(const json&)>& human,
            const std::function<void(const json&)>& on_event = {});
// Adds --json to `sub`.
void add_json_flag(CLI::App* sub, Invocation& inv);

std::string fmt_ms(double v);                                    // "1.234"
std::string human_bytes(uint64_t v);                             // "1.5MiB"
std::string utc(int64_t unix_seconds);                           // "2026-11-22T05:30:00Z"
std::optional<int64_t> size_with_unit(const std::string& text);  // "64K", "1M", "4096"
// This process's job id when --job names none: the daemon's rpc.jobid_var and
// rpc.jobid_name resolved in this command's environment; "" when none.
std::string own_job_id(const Invocation& inv);
std::optional<double> seconds_with_unit(const std::string& text);  // "90", "90s", "30m", "2h", "1d"

// The subcommands.
void add_keygen(CLI::App& app, Invocation& inv);
void add_ping(CLI::App& app, Invocation& inv);
void add_diag(CLI::App& app, Invocation& inv);
void add_config(CLI::App& app, Invocation& inv);
void add_nis_and_peers(CLI::App& app, Invocation& inv);
void add_status(CLI::App& app, Invocation& inv);
void add_health(CLI::App& app, Invocation& inv);
void add_mesh(CLI::App& app, Invocation& inv);
void add_netverify(CLI::App& app, Invocation& inv);
void add_selftest(CLI::App& app, Invocation& inv);
void add_tune(CLI::App& app, Invocation& inv);
void add_fault(CLI::App& app, Invocation& inv);
void add_storage(CLI::App& app, Invocation& inv);
void add_upgrade(CLI::App& app, Invocation& inv);
void add_route(CLI::App& app, Invocation& inv);
void add_nrs(CLI::App& app, Invocation& inv);

}  // namespace pfsnet::cli

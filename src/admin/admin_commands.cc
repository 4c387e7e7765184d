#include "admin/admin_commands.h"

#include <cassert>

namespace pfsnet {

using nlohmann::json;

std::string admin_line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void AdminCommands::add(std::string name, AdminHandler h, std::string http_path) {
  assert(!handlers_.count(name));
  if (!http_path.empty()) http_[http_path] = name;
  handlers_[std::move(name)] = std::move(h);
}

Result<json> AdminCommands::dispatch(const json& req, const AdminEmit& emit) const noexcept {
  try {
    if (!req.is_object())
      return Status(Code::kInvalidArgument, "malformed request: not a JSON object");
    auto cmd = req.find("cmd");
    if (cmd == req.end() || !cmd->is_string())
      return Status(Code::kInvalidArgument, "malformed request: no \"cmd\" string");
    auto it = handlers_.find(cmd->get_ref<const std::string&>());
    if (it == handlers_.end())
      return Status(Code::kInvalidArgument,
                    "unknown command '" + cmd->get_ref<const std::string&>() + "'");
    return it->second(req, emit);
  } catch (const std::exception& e) {
    // A field of the wrong type (json::type_error), a bad conversion: the request's fault.
    return Status(Code::kInvalidArgument, std::string("bad request: ") + e.what());
  } catch (...) {
    return Status(Code::kInternal, "bad request: unknown exception");
  }
}

json AdminCommands::handle_line(std::string_view line, const AdminEmit& emit) const noexcept {
  try {
    json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
    Result<json> r = req.is_discarded()
                         ? Result<json>(Status(Code::kInvalidArgument,
                                               "malformed request: not one JSON object on a line"))
                         : dispatch(req, emit);
    if (r.ok()) return json{{"ok", true}, {"result", std::move(*r)}};
    return json{{"ok", false}, {"error", r.status().message()}};
  } catch (...) {  // only allocation can throw here
    return json{{"ok", false}, {"error", "internal error"}};
  }
}

Result<json> AdminCommands::http_get(const std::string& path,
                                     const std::multimap<std::string, std::string>& params) const {
  auto it = http_.find(path);
  if (it == http_.end()) return Status(Code::kNotFound, "no such API: " + path);
  json req = {{"cmd", it->second}};
  for (const auto& [k, v] : params) req[k] = v;
  return dispatch(req, [](const json&) { return true; });
}

std::vector<std::string> AdminCommands::names() const {
  std::vector<std::string> out;
  for (const auto& [name, h] : handlers_) out.push_back(name);
  return out;
}

}  // namespace pfsnet

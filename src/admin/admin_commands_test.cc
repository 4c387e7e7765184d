#include "admin/admin_commands.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "admin/admin_client.h"
#include "admin/admin_server.h"

namespace pfsnet {
namespace {

using nlohmann::json;

AdminCommands sample_commands() {
  AdminCommands c;
  c.add("echo", [](const json& req, const AdminEmit&) -> Result<json> {
    return json{{"said", req.at("text").get<std::string>()}};  // throws on a missing field
  });
  c.add("boom", [](const json&, const AdminEmit&) -> Result<json> {
    throw std::runtime_error("handler bug");
  });
  c.add("odd", [](const json&, const AdminEmit&) -> Result<json> { throw 42; });
  c.add("refuse", [](const json&, const AdminEmit&) -> Result<json> {
    return Status(Code::kInvalidArgument, "no, because \xff\xfe");  // not UTF-8
  });
  c.add("progress", [](const json&, const AdminEmit& emit) -> Result<json> {
    emit({{"event", "step"}});
    return json{{"done", true}};
  });
  c.add(
      "stats", [](const json& req, const AdminEmit&) -> Result<json> { return req; }, "diag/rpc");
  return c;
}

const AdminEmit kNoEmit = [](const json&) { return true; };

std::string error_of(const json& reply) {
  EXPECT_EQ(reply.value("ok", true), false) << reply.dump();
  return reply.value("error", std::string());
}

TEST(AdminCommandsTest, DispatchesByName) {
  AdminCommands c = sample_commands();
  json r = c.handle_line(R"({"cmd":"echo","text":"hi"})", kNoEmit);
  EXPECT_EQ(r, (json{{"ok", true}, {"result", {{"said", "hi"}}}}));
  std::vector<json> progress;
  r = c.handle_line(R"({"cmd":"progress"})", [&](const json& j) {
    progress.push_back(j);
    return true;
  });
  EXPECT_EQ(r["result"]["done"], true);
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_EQ(progress[0]["event"], "step");
  EXPECT_EQ(c.names(),
            (std::vector<std::string>{"boom", "echo", "odd", "progress", "refuse", "stats"}));
}

TEST(AdminCommandsTest, BadLinesBecomeErrorReplies) {
  AdminCommands c = sample_commands();
  // Bytes that are not UTF-8 (this line used to abort pfsnetd), not JSON, not an object.
  for (std::string line : {std::string("\xff\xfe garbage"), std::string("{\"cmd\": \"\xff\"}"),
                           std::string("not json"), std::string(""), std::string("[1,2]"),
                           std::string("{\"cmd\": 7}"), std::string("{}"), std::string("null")}) {
    json r = c.handle_line(line, kNoEmit);
    EXPECT_FALSE(error_of(r).empty()) << line;
    // The reply must render as a line whatever the input held.
    std::string out = admin_line(r);
    EXPECT_EQ(out.find('\n'), std::string::npos);
    EXPECT_TRUE(json::accept(out)) << out;
  }
  EXPECT_NE(error_of(c.handle_line(R"({"cmd":"nope"})", kNoEmit)).find("unknown command 'nope'"),
            std::string::npos);
}

TEST(AdminCommandsTest, HandlerExceptionsBecomeErrorReplies) {
  AdminCommands c = sample_commands();
  EXPECT_NE(error_of(c.handle_line(R"({"cmd":"boom"})", kNoEmit)).find("handler bug"),
            std::string::npos);
  EXPECT_NE(error_of(c.handle_line(R"({"cmd":"odd"})", kNoEmit)).find("unknown exception"),
            std::string::npos);
  // A field of the wrong type or a missing one: json throws inside the handler.
  EXPECT_FALSE(error_of(c.handle_line(R"({"cmd":"echo","text":5})", kNoEmit)).empty());
  EXPECT_FALSE(error_of(c.handle_line(R"({"cmd":"echo"})", kNoEmit)).empty());
  // An error message that is not UTF-8 still renders.
  json r = c.handle_line(R"({"cmd":"refuse"})", kNoEmit);
  EXPECT_TRUE(json::accept(admin_line(r)));
  EXPECT_NE(admin_line(r).find("no, because"), std::string::npos);
}

TEST(AdminCommandsTest, HttpPathsMapToCommands) {
  AdminCommands c = sample_commands();
  auto r = c.http_get("diag/rpc", {{"what", "all"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["cmd"], "stats");
  EXPECT_EQ((*r)["what"], "all");
  auto none = c.http_get("echo", {});  // served on the socket only
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kNotFound);
}

// The real server on a real UNIX socket: garbage in, an error line out, and it goes on
// serving.
TEST(AdminServerTest, SurvivesGarbageOnTheSocket) {
  AdminCommands c = sample_commands();
  std::string path = (std::filesystem::temp_directory_path() /
                      ("pfsnet-admin-test-" + std::to_string(getpid()) + ".sock"))
                         .string();
  AdminServer server(c);
  ASSERT_TRUE(server.start(path).ok());
  auto raw = [&](const std::string& bytes) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.c_str(), path.size());
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
    std::string reply;
    char buf[4096];
    for (int i = 0; i < 100; ++i) {  // to EOF: the server closes after its reply
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      reply.append(buf, size_t(n));
    }
    close(fd);
    return reply;
  };
  std::string reply = raw("\xff\xfe garbage\n");
  ASSERT_FALSE(reply.empty());
  json j = json::parse(reply);
  EXPECT_EQ(j["ok"], false);
  reply = raw("{\"cmd\":\"boom\"}\n");
  EXPECT_EQ(json::parse(reply)["ok"], false);
  auto r = admin_request(path, {{"cmd", "echo"}, {"text", "still here"}}, std::chrono::seconds(10));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)["said"], "still here");
  server.stop();
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A daemon that refuses a peer writes why and closes, maybe before the request arrives:
// the request's send then fails, and the refusal must still be what the CLI reports
// (CI's TSan run: "pfsnetd closed the admin connection" instead of the uid refused).
TEST(AdminClientTest, ARefusalWrittenBeforeTheRequestIsSentIsStillReported) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::string refusal = json{{"ok", false}, {"error", "uid 65534 is not allowed"}}.dump() + "\n";
  ASSERT_EQ(send(sv[1], refusal.data(), refusal.size(), MSG_NOSIGNAL), ssize_t(refusal.size()));
  close(sv[1]);
  auto r = admin_exchange(sv[0], {{"cmd", "nis"}}, std::chrono::seconds(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kRemoteError);
  EXPECT_EQ(r.status().message(), "uid 65534 is not allowed");
  // With nothing written before the close, it is reported as closed, not waited for.
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  close(sv[1]);
  r = admin_exchange(sv[0], {{"cmd", "nis"}}, std::chrono::seconds(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kClosed);
}

}  // namespace
}  // namespace pfsnet

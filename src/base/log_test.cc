#include "base/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

namespace pfsnet {
namespace {

using json = nlohmann::json;

// One line as the JSON format writes it, read back.
json format(const spdlog::formatter& proto, const char* file, spdlog::level::level_enum lvl,
            std::string_view msg) {
  auto f = proto.clone();
  spdlog::details::log_msg m(spdlog::source_loc{file, 7, "f"}, "pfsnet", lvl,
                             spdlog::string_view_t(msg.data(), msg.size()));
  spdlog::memory_buf_t out;
  f->format(m, out);
  std::string s(out.data(), out.size());
  EXPECT_EQ(s.find('\n'), s.size() - 1) << "one line: " << s;
  return json::parse(s);
}

TEST(LogTest, AJsonLineNamesTheNodeComponentAndLevel) {
  auto f = json_log_formatter("oss01");
  json j = format(*f, "/build/pfsnet/src/net/net.cc", spdlog::level::warn, "closing \"c\"\nnext");
  EXPECT_EQ(j["node"], "oss01");
  EXPECT_EQ(j["component"], "net");
  EXPECT_EQ(j["level"], "warning");
  EXPECT_EQ(j["msg"], "closing \"c\"\nnext");  // quotes and a newline escaped: still one line
  const std::string ts = j["ts"];
  ASSERT_EQ(ts.size(), 24u) << ts;  // 2026-12-06T18:38:31.123Z
  EXPECT_EQ(ts[10], 'T');
  EXPECT_EQ(ts.back(), 'Z');
  EXPECT_FALSE(j.contains("xid"));  // about no RPC
  EXPECT_FALSE(j.contains("event"));
}

TEST(LogTest, TheComponentIsTheSourcesPart) {
  EXPECT_EQ(log_component("/w/src/rpc/rpc_server.cc"), "rpc");
  EXPECT_EQ(log_component("/w/apps/pfsnetd/main.cc"), "pfsnetd");
  EXPECT_EQ(log_component("/w/mysrc/x.cc"), "pfsnet");  // not a src/ directory
  EXPECT_EQ(log_component("main.cc"), "pfsnet");
  EXPECT_EQ(log_component(nullptr), "pfsnet");
  EXPECT_EQ(log_component(""), "pfsnet");
}

TEST(LogTest, LinesAboutAnRpcCarryItsXidJobAndTraceOnThisThreadOnly) {
  auto f = json_log_formatter("c1");
  TraceContext t;
  t.trace_id = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
  t.parent_id = {0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
  {
    ScopedLogRpc rpc(LogRpc{812, "slurm.77", &t});
    json j = format(*f, "/w/src/storage/block_service.cc", spdlog::level::info, "m");
    EXPECT_EQ(j["xid"], 812);
    EXPECT_EQ(j["job"], "slurm.77");
    EXPECT_EQ(j["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(j["span_id"], "00f067aa0ba902b7");
    {
      ScopedLogRpc inner(LogRpc{9, "", nullptr});  // the innermost names the line
      json k = format(*f, "/w/src/rpc/x.cc", spdlog::level::info, "m");
      EXPECT_EQ(k["xid"], 9);
      EXPECT_FALSE(k.contains("job"));
      EXPECT_FALSE(k.contains("trace_id"));
    }
    EXPECT_EQ(format(*f, "/w/src/rpc/x.cc", spdlog::level::info, "m")["xid"], 812);
    json other;
    std::thread([&] { other = format(*f, "/w/src/rpc/x.cc", spdlog::level::info, "m"); }).join();
    EXPECT_FALSE(other.contains("xid")) << other.dump();
  }
  EXPECT_FALSE(format(*f, "/w/src/rpc/x.cc", spdlog::level::info, "m").contains("xid"));
}

TEST(LogTest, AnEventsFieldsGoOnItsLinesAndBytesThatAreNotUtf8DoNotStopALine) {
  auto f = json_log_formatter("s1");
  const LogField outer[] = {{"event", "outer"}, {"subject", "oss01"}};
  const LogField inner[] = {
      {"event", "health_problem_started"}, {"code", "LOSSY"}, {"lasted_s", {}, 12.5}};
  ScopedLogFields a(outer);
  {
    ScopedLogFields b(inner);
    json j = format(*f, "/w/src/probe/p.cc", spdlog::level::warn, "bad \xff byte");
    EXPECT_EQ(j["event"], "health_problem_started");  // the innermost wins
    EXPECT_EQ(j["code"], "LOSSY");
    EXPECT_EQ(j["subject"], "oss01");
    EXPECT_TRUE(j["lasted_s"].is_number()) << j.dump();  // a number, not its text
    EXPECT_EQ(j["lasted_s"], 12.5);
    EXPECT_EQ(j["msg"], "bad \xef\xbf\xbd byte");  // U+FFFD
  }
  EXPECT_EQ(format(*f, "/w/src/probe/p.cc", spdlog::level::warn, "m")["event"], "outer");
}

TEST(LogTest, AnUnknownLevelOrFormatIsRefusedAndChangesNothing) {
  EXPECT_EQ(init_logging("loud").code(), Code::kInvalidArgument);
  Status s = init_logging("info", "xml");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("text or json"), std::string::npos) << s.message();
  ASSERT_TRUE(init_logging("warn", "text").ok());
  EXPECT_EQ(spdlog::get_level(), spdlog::level::warn);
  EXPECT_FALSE(init_logging("debug", "yaml").ok());
  EXPECT_EQ(spdlog::get_level(), spdlog::level::warn);  // unchanged
}

}  // namespace
}  // namespace pfsnet

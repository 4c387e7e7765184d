// Typed RPC methods (rpc/rpc_method.h) over the engine tests' two nodes: a method declared
// once, served and called by it; a malformed request never reaches the handler; a
// malformed reply fails the call with kProtocol, naming the method.
#include "rpc/rpc_method.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "rpc/rpc_test_fixture.h"
#include "wire/byte_codec.h"

namespace pfsnet {
namespace {

using namespace rpc_test;

// A request: a word and a count; the reply: the word repeated.
struct Say {
  std::string word;
  uint32_t times = 0;
};
Buffer encode_say(const Say& s) {
  ByteWriter w;
  w.str(s.word);
  w.u32(s.times);
  return w.take();
}
Result<Say> decode_say(std::span<const uint8_t> b) {
  ByteReader r(b);
  Say s;
  s.word = r.str();
  s.times = r.u32();
  if (!r.done() || s.times > 16) return Status(Code::kProtocol, "SAY: malformed");
  return s;
}
Buffer encode_text(const std::string& s) { return Buffer::copy_of(std::string_view(s)); }
Result<std::string> decode_text(std::span<const uint8_t> b) {
  if (b.empty()) return Status(Code::kProtocol, "empty");
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Types no message of the registry (msg_types.h) has: a name given twice is a defect.
constexpr uint32_t kSay = 940, kSayBadly = 941;
const RpcMethod<Say, std::string> kSayMethod{.type = kSay,
                                             .name = "SAY",
                                             .exec = Execution::kRepeatable,
                                             .encode_request = encode_say,
                                             .decode_request = decode_say,
                                             .encode_reply = encode_text,
                                             .decode_reply = decode_text};
// The same request, answered with an empty reply: malformed for its decoder.
const RpcMethod<Say, std::string> kSayBadlyMethod{.type = kSayBadly,
                                                  .name = "SAY_BADLY",
                                                  .exec = Execution::kRepeatable,
                                                  .encode_request = encode_say,
                                                  .decode_request = decode_say,
                                                  .encode_reply = encode_text,
                                                  .decode_reply = decode_text};

TEST_F(RpcTest, ATypedMethodIsServedAndCalledFromOneDeclaration) {
  int handled = 0;
  serve_async(server_.rpc, kSayMethod, [&](Say&& s, RpcRequest&, TypedResponder<std::string> r) {
    ++handled;
    std::string out;
    for (uint32_t i = 0; i < s.times; ++i) out += s.word;
    r.reply(out);
  });
  serve_async(server_.rpc, kSayBadlyMethod,
              [&](Say&&, RpcRequest&, TypedResponder<std::string> r) { r.reply(""); });
  EXPECT_EQ(server_.rpc.type_name(kSay), "SAY");

  std::vector<Result<std::string>> got;
  auto cb = [&](Result<std::string> r) { got.push_back(std::move(r)); };
  call_async(client_.rpc, kSayMethod, b_, Say{"ab", 3}, cb, CallOptions{});
  pump_until([&] { return got.size() == 1; });
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].status().to_string();
  EXPECT_EQ(*got[0], "ababab");
  EXPECT_EQ(handled, 1);

  // A request its decoder refuses is answered kProtocol; the handler never sees it.
  client_.rpc.call_async(
      b_, kSay, encode_say(Say{"x", 99}), nullptr, [&](RpcReply&& r) { got.push_back(r.status); },
      CallOptions{});
  pump_until([&] { return got.size() == 2; });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].status().code(), Code::kProtocol) << got[1].status().to_string();
  EXPECT_EQ(handled, 1);

  // A reply its decoder refuses fails the call with kProtocol, naming the method.
  call_async(client_.rpc, kSayBadlyMethod, b_, Say{"x", 1}, cb, CallOptions{});
  pump_until([&] { return got.size() == 3; });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].status().code(), Code::kProtocol);
  EXPECT_NE(got[2].status().message().find("malformed SAY_BADLY reply"), std::string::npos)
      << got[2].status().to_string();
}

// A page of a table, answered in the reply's bulk from a worker thread.
constexpr uint32_t kPage = 942;
const RpcMethod<Say, std::string> kPageMethod{.type = kPage,
                                              .name = "PAGE",
                                              .exec = Execution::kRepeatable,
                                              .encode_request = encode_say,
                                              .decode_request = decode_say,
                                              .encode_reply = encode_text,
                                              .decode_reply = decode_text,
                                              .mode = HandlerMode::kWorker,
                                              .reply_in = ReplyIn::kBulk};

TEST_F(RpcTest, ASynchronousMethodAnswersFromItsThreadInPayloadOrBulk) {
  std::atomic<int> handled{0};
  std::thread::id io_thread, page_thread;
  serve(server_.rpc, kSayMethod, [&](Say&& s, RpcRequest&) -> Result<std::string> {
    ++handled;
    io_thread = std::this_thread::get_id();
    if (s.word.empty()) return Status(Code::kInvalidArgument, "nothing to say");
    std::string out;
    for (uint32_t i = 0; i < s.times; ++i) out += s.word;
    return out;
  });
  serve(server_.rpc, kPageMethod, [&](Say&& s, RpcRequest&) -> Result<std::string> {
    ++handled;
    page_thread = std::this_thread::get_id();
    return std::string(size_t(s.times) * 1000, s.word.at(0));
  });

  std::vector<Result<std::string>> got;
  std::mutex mu;
  auto cb = [&](Result<std::string> r) {
    std::lock_guard lk(mu);
    got.push_back(std::move(r));
  };
  auto count = [&] {
    std::lock_guard lk(mu);
    return got.size();
  };
  call_async(client_.rpc, kSayMethod, b_, Say{"cd", 2}, cb, CallOptions{});
  pump_until([&] { return count() == 1; });
  // The handler's error is the caller's status, as it was returned.
  call_async(client_.rpc, kSayMethod, b_, Say{"", 2}, cb, CallOptions{});
  pump_until([&] { return count() == 2; });
  // 16,000 bytes: in the bulk, and a worker, not the I/O thread, built it.
  call_async(client_.rpc, kPageMethod, b_, Say{"z", 16}, cb, CallOptions{});
  pump_until([&] { return count() == 3; });
  ASSERT_EQ(count(), 3u);
  ASSERT_TRUE(got[0].ok()) << got[0].status().to_string();
  EXPECT_EQ(*got[0], "cdcd");
  EXPECT_EQ(got[1].status().code(), Code::kInvalidArgument);
  EXPECT_EQ(got[1].status().message(), "nothing to say");
  ASSERT_TRUE(got[2].ok()) << got[2].status().to_string();
  EXPECT_EQ(*got[2], std::string(16000, 'z'));
  EXPECT_NE(page_thread, std::thread::id());
  EXPECT_NE(page_thread, io_thread);
  EXPECT_EQ(handled.load(), 3);

  // The page's reply is in the bulk: its payload is empty.
  Replies raw;
  client_.rpc.call_async(b_, kPage, encode_say(Say{"y", 1}), nullptr, raw.cb(), CallOptions{});
  pump_until([&] { return raw.got.size() == 1; });
  ASSERT_EQ(raw.got.size(), 1u);
  ASSERT_TRUE(raw.got[0].status.ok()) << raw.got[0].status.to_string();
  EXPECT_TRUE(raw.got[0].payload.empty());
  EXPECT_EQ(raw.got[0].bulk.size(), 1000u);

  // A request its decoder refuses never reaches the handler.
  client_.rpc.call_async(b_, kPage, encode_say(Say{"y", 99}), nullptr, raw.cb(), CallOptions{});
  pump_until([&] { return raw.got.size() == 2; });
  ASSERT_EQ(raw.got.size(), 2u);
  EXPECT_EQ(raw.got[1].status.code(), Code::kProtocol);
  EXPECT_EQ(handled.load(), 4);
}

TEST(EmptyMessageTest, CarriesNothingAndRefusesAnything) {
  EXPECT_TRUE(encode_empty(Empty{}).empty());
  EXPECT_TRUE(decode_empty({}).ok());
  uint8_t one = 0;
  Result<Empty> e = decode_empty(std::span<const uint8_t>(&one, 1));
  EXPECT_EQ(e.status().code(), Code::kProtocol);
}

}  // namespace
}  // namespace pfsnet

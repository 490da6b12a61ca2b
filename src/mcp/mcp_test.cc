// The JSON-RPC envelope, the UTF-8 cut of the output bound, and the
// lifecycle and tool table as far as they need no engine (the tools
// themselves are tested end to end by tests/clients/mcp).
#include <gtest/gtest.h>

#include <string>

#include "mcp/jsonrpc.h"
#include "mcp/output.h"
#include "mcp/server.h"
#include "mcp/tools.h"

namespace cordon::mcp {
namespace {

using nlohmann::json;

TEST(JsonRpc, ParsesRequestsNotificationsAndResponses) {
  auto r = Parse(R"({"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->kind, Message::Kind::kRequest);
  EXPECT_EQ(r->id, 7);
  EXPECT_EQ(r->method, "tools/list");

  auto n = Parse(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->kind, Message::Kind::kNotification);
  EXPECT_TRUE(n->params.is_null());

  auto s = Parse(R"({"jsonrpc":"2.0","id":"a","result":{}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, Message::Kind::kResponse);
  EXPECT_EQ(s->id, "a");
}

TEST(JsonRpc, RefusesWhatIsNotAMessage) {
  auto code = [](std::string_view text) {
    auto m = Parse(text);
    return m ? 0 : m.error().code;
  };
  EXPECT_EQ(code("{not json"), kParseError);
  EXPECT_EQ(code(""), kParseError);
  EXPECT_EQ(code("[]"), kInvalidRequest);  // a batch
  EXPECT_EQ(code(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])"), kInvalidRequest);
  EXPECT_EQ(code("42"), kInvalidRequest);
  EXPECT_EQ(code(R"({"id":1,"method":"ping"})"), kInvalidRequest);  // no jsonrpc
  EXPECT_EQ(code(R"({"jsonrpc":"1.0","id":1,"method":"ping"})"), kInvalidRequest);
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})"), kInvalidRequest);
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":null,"method":"ping"})"), kInvalidRequest);
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1,"method":3})"), kInvalidRequest);
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1})"), kInvalidRequest);
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","result":{}})"), kInvalidRequest);  // a response needs an id
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1,"result":{},"error":{}})"), kInvalidRequest);
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1,"method":"ping","params":[1]})"), kInvalidParams);
}

TEST(JsonRpc, AnErrorCarriesTheIdWhenItWasRead) {
  auto m = Parse(R"({"jsonrpc":"1.0","id":"x","method":"ping"})");
  ASSERT_FALSE(m);
  json e = ErrorResponse(m.error());
  EXPECT_EQ(e["id"], "x");
  EXPECT_EQ(e["error"]["code"], kInvalidRequest);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("jsonrpc"), std::string::npos);
  EXPECT_TRUE(ErrorResponse(Parse("{").error())["id"].is_null());
}

TEST(Utf8Cut, NeverSplitsASequence) {
  const std::string euro = "\xE2\x82\xAC";  // 3 bytes
  const std::string text = "ab" + euro + "c";
  EXPECT_EQ(Utf8Cut(text, 100), text.size());
  EXPECT_EQ(Utf8Cut(text, 2), 2u);
  EXPECT_EQ(Utf8Cut(text, 3), 2u);
  EXPECT_EQ(Utf8Cut(text, 4), 2u);
  EXPECT_EQ(Utf8Cut(text, 5), 5u);
  const std::string emoji = "\xF0\x9F\x98\x80";  // 4 bytes
  for (size_t limit = 0; limit < 4; ++limit) EXPECT_EQ(Utf8Cut(emoji + emoji, 4 + limit), 4u);
  EXPECT_EQ(Utf8Cut("", 0), 0u);
  // Not UTF-8: a run of continuation bytes is cut where the limit falls.
  EXPECT_EQ(Utf8Cut(std::string(10, '\x80'), 6), 6u);
}

TEST(BoundOutput, CutsMarksAndCounts) {
  Bounded small = BoundOutput("hello", 64);
  EXPECT_EQ(small.text, "hello");
  EXPECT_FALSE(small.truncated);

  std::string big(100, 'x');
  Bounded cut = BoundOutput(big, 10);
  EXPECT_TRUE(cut.truncated);
  EXPECT_EQ(cut.text, std::string(10, 'x') + "\n[... 90 bytes truncated]");

  // What the capture already dropped is counted too.
  Bounded dropped = BoundOutput(std::string(20, 'y'), 10, 1000, true);
  EXPECT_EQ(dropped.text, std::string(10, 'y') + "\n[... 990 bytes truncated]");
  Bounded kept_all = BoundOutput("abc", 10, 50, true);
  EXPECT_TRUE(kept_all.truncated);
  EXPECT_EQ(kept_all.text, "abc\n[... 47 bytes truncated]");

  const std::string euro = "\xE2\x82\xAC";
  Bounded utf8 = BoundOutput(euro + euro, 4);
  EXPECT_EQ(utf8.text, euro + "\n[... 3 bytes truncated]");
}

TEST(Tools, EveryToolHasBothSchemas) {
  const char* names[] = {"run",           "session_create", "session_exec", "session_interrupt",
                         "session_close", "session_list",   "file_write",   "file_read",
                         "file_list"};
  json list = ToolList();
  ASSERT_EQ(list.size(), std::size(names));
  for (const char* name : names) {
    const Tool* tool = FindTool(name);
    ASSERT_NE(tool, nullptr) << name;
    EXPECT_EQ(tool->input_schema["type"], "object") << name;
    EXPECT_EQ(tool->output_schema["type"], "object") << name;
  }
  EXPECT_EQ(FindTool("nope"), nullptr);
}

TEST(Tools, AnErrorResultHasNoStructuredContent) {
  json e = ToolError("id: is required");
  EXPECT_TRUE(e["isError"].get<bool>());
  EXPECT_FALSE(e.contains("structuredContent"));
  json ok = ToolOk({{"a", 1}});
  EXPECT_FALSE(ok["isError"].get<bool>());
  EXPECT_EQ(ok["structuredContent"]["a"], 1);
  EXPECT_EQ(json::parse(ok["content"][0]["text"].get<std::string>())["a"], 1);
}

TEST(Versions, NegotiatesDownAndFallsBackToTheNewest) {
  EXPECT_TRUE(SupportedVersion("2025-11-25"));
  EXPECT_TRUE(SupportedVersion("2025-06-18"));
  EXPECT_TRUE(SupportedVersion("2025-03-26"));
  EXPECT_FALSE(SupportedVersion("2024-11-05"));
  EXPECT_EQ(kProtocolVersions[0], "2025-11-25");
}

TEST(Logging, LevelsAreRfc5424sLeastSevereFirst) {
  EXPECT_EQ(LogLevel("debug"), 0);
  EXPECT_LT(LogLevel("info"), LogLevel("warning"));
  EXPECT_LT(LogLevel("error"), LogLevel("emergency"));
  EXPECT_EQ(LogLevel("emergency"), static_cast<int>(std::size(kLogLevels)) - 1);
  EXPECT_EQ(LogLevel("chatty"), -1);
  EXPECT_EQ(LogLevel(""), -1);
  // A new connection hears nothing until it asks (logging/setLevel).
  Connection c;
  EXPECT_GT(c.state->log_level, LogLevel("emergency"));
}

TEST(Progress, IsSentWellWithinTheFiveSecondsTheIssueAsks) {
  EXPECT_LE(kProgressEvery, std::chrono::milliseconds(2500));
}

}  // namespace
}  // namespace cordon::mcp

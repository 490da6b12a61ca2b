// The JSON-RPC envelope, the UTF-8 cut of the output bound, the lifecycle
// and tool table as far as they need no engine, and the 2026-07-28 era's
// selection, _meta, server/discover and HTTP header checks (the tools
// themselves are tested end to end by tests/clients/mcp and, in both eras,
// tests/clients/inspector).
#include <gtest/gtest.h>

#include <string>

#include "mcp/http_transport.h"
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

TEST(BoundStrings, KeepsStringsInOrderUntilTheBudgetIsUsedUp) {
  nlohmann::json results = nlohmann::json::parse(
      R"([{"data": {"text/plain": "abcd", "text/html": "0123456789"}, "metadata": {}},
          {"data": {"text/plain": "xyz"}, "n": 5}])");
  uint64_t budget = 100;
  nlohmann::json whole = results;
  EXPECT_FALSE(BoundStrings(whole, budget));
  EXPECT_EQ(whole, results);
  EXPECT_EQ(budget, 83u);

  budget = 9;
  EXPECT_TRUE(BoundStrings(results, budget));
  EXPECT_EQ(budget, 0u);
  // nlohmann's objects iterate in key order: text/html before text/plain.
  EXPECT_EQ(results[0]["data"]["text/html"], "012345678\n[... 1 bytes truncated]");
  EXPECT_EQ(results[0]["data"]["text/plain"], "\n[... 4 bytes truncated]");
  EXPECT_EQ(results[1]["data"]["text/plain"], "\n[... 3 bytes truncated]");
  EXPECT_EQ(results[1]["n"], 5);
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

// A request of the modern era, as the 2026-07-28 spec's examples send it.
Message Modern(std::string method, json params = json::object(),
               json meta = {{kMetaProtocolVersion, "2026-07-28"},
                            {kMetaClientCapabilities, json::object()},
                            {kMetaClientInfo, {{"name", "test"}, {"version", "1"}}}}) {
  params["_meta"] = std::move(meta);
  auto m = Validate({{"jsonrpc", "2.0"}, {"id", 3}, {"method", method}, {"params", params}});
  EXPECT_TRUE(m) << m.error().message;
  return *m;
}

TEST(Era, PerRequestMetaIsModernInitializeAndItsAbsenceAreLegacy) {
  EXPECT_TRUE(ModernRequest(Modern("tools/list")));
  EXPECT_TRUE(ModernRequest(Modern("server/discover")));
  // A progress token alone is no era: legacy clients send it too.
  EXPECT_FALSE(ModernRequest(Modern("tools/list", json::object(), {{"progressToken", 1}})));
  EXPECT_FALSE(ModernRequest(*Parse(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})")));
  EXPECT_FALSE(ModernRequest(*Parse(
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}})")));
  EXPECT_FALSE(ModernRequest(*Parse(R"({"jsonrpc":"2.0","id":1,"result":{}})")));
  EXPECT_TRUE(ModernVersion("2026-07-28"));
  EXPECT_FALSE(ModernVersion("2025-11-25"));
  EXPECT_FALSE(SupportedVersion("2026-07-28"));  // never negotiated by initialize
  EXPECT_EQ(AllVersions(), json({"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"}));
}

TEST(Era, TheEnvelopeIsCheckedFieldByField) {
  auto e = ReadEnvelope(Modern("tools/call"));
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(e->protocol_version, "2026-07-28");
  EXPECT_TRUE(e->client_capabilities.is_object());
  EXPECT_EQ(e->client_info["name"], "test");
  EXPECT_EQ(e->log_level, -1);  // no log messages unless asked

  auto with_level = ReadEnvelope(Modern("tools/call", json::object(),
                                        {{kMetaProtocolVersion, "2026-07-28"},
                                         {kMetaClientCapabilities, json::object()},
                                         {kMetaLogLevel, "warning"}}));
  ASSERT_TRUE(with_level);
  EXPECT_EQ(with_level->log_level, LogLevel("warning"));

  auto error = [](json meta) {
    auto r = ReadEnvelope(Modern("tools/list", json::object(), std::move(meta)));
    return r ? RpcError{0, ""} : r.error();
  };
  RpcError no_caps = error({{kMetaProtocolVersion, "2026-07-28"}});
  EXPECT_EQ(no_caps.code, kInvalidParams);
  EXPECT_NE(no_caps.message.find(kMetaClientCapabilities), std::string::npos) << no_caps.message;
  EXPECT_EQ(no_caps.id, 3);
  EXPECT_EQ(
      error({{kMetaProtocolVersion, 20260728}, {kMetaClientCapabilities, json::object()}}).code,
      kInvalidParams);
  EXPECT_EQ(
      error({{kMetaProtocolVersion, "2026-07-28"}, {kMetaClientCapabilities, json::array()}}).code,
      kInvalidParams);
  EXPECT_EQ(error({{kMetaProtocolVersion, "2026-07-28"},
                   {kMetaClientCapabilities, json::object()},
                   {kMetaClientInfo, "me"}})
                .code,
            kInvalidParams);
  RpcError level = error({{kMetaProtocolVersion, "2026-07-28"},
                          {kMetaClientCapabilities, json::object()},
                          {kMetaLogLevel, "chatty"}});
  EXPECT_EQ(level.code, kInvalidParams);
  EXPECT_NE(level.message.find("debug"), std::string::npos) << level.message;

  // A version not served per request: UnsupportedProtocolVersionError, with
  // the versions to retry with. A legacy version is one of them, but only
  // after initialize.
  for (const char* asked : {"1900-01-01", "2025-11-25"}) {
    RpcError v = error({{kMetaProtocolVersion, asked}, {kMetaClientCapabilities, json::object()}});
    EXPECT_EQ(v.code, kUnsupportedProtocolVersion) << asked;
    EXPECT_EQ(v.data["requested"], asked);
    EXPECT_EQ(v.data["supported"], AllVersions());
    json response = ErrorResponse(v);
    EXPECT_EQ(response["error"]["data"]["requested"], asked);
  }
  // No data member unless there is some.
  EXPECT_FALSE(ErrorResponse(RpcError{kInvalidParams, "x", 1})["error"].contains("data"));
}

TEST(Discover, NamesEveryVersionTheToolsAndCacheHints) {
  json r = ModernResponse(Response(3, DiscoverResult()));
  const json& result = r["result"];
  EXPECT_EQ(result["resultType"], "complete");
  EXPECT_EQ(result["supportedVersions"], AllVersions());
  EXPECT_TRUE(result["capabilities"]["tools"].is_object());
  EXPECT_TRUE(result["instructions"].is_string());
  EXPECT_EQ(result["ttlMs"], 0);
  EXPECT_EQ(result["cacheScope"], "private");
  EXPECT_EQ(result["_meta"][kMetaServerInfo]["name"], "cordon");
}

TEST(Era, ModernResultsCarryResultTypeErrorsAndNullPassUnchanged) {
  json ok = ModernResponse(Response(1, ToolOk({{"a", 1}})));
  EXPECT_EQ(ok["result"]["resultType"], "complete");
  EXPECT_EQ(ok["result"]["structuredContent"]["a"], 1);
  json error = ErrorResponse(RpcError{kInvalidParams, "unknown tool: x", 1});
  EXPECT_EQ(ModernResponse(error), error);
  EXPECT_TRUE(ModernResponse(nullptr).is_null());
}

// The headers a conforming 2026-07-28 client sends with `m`.
api::Header Headers(std::initializer_list<std::pair<const char*, const char*>> fields) {
  api::Header h;
  for (const auto& [name, value] : fields) h.set(name, value);
  return h;
}

TEST(EraHeaders, MustMatchTheBody) {
  const Message call = Modern("tools/call", {{"name", "run"}, {"arguments", json::object()}});
  EXPECT_FALSE(CheckModernHeaders(Headers({{"MCP-Protocol-Version", "2026-07-28"},
                                           {"Mcp-Method", "tools/call"},
                                           {"Mcp-Name", "run"}}),
                                  call));
  // Header names are case-insensitive; values are not.
  EXPECT_FALSE(CheckModernHeaders(Headers({{"mcp-protocol-version", "2026-07-28"},
                                           {"MCP-METHOD", "tools/call"},
                                           {"mcp-name", "run"}}),
                                  call));
  // Mcp-Name in the spec's base64 form: "run" is cnVu.
  EXPECT_FALSE(CheckModernHeaders(Headers({{"MCP-Protocol-Version", "2026-07-28"},
                                           {"Mcp-Method", "tools/call"},
                                           {"Mcp-Name", "=?base64?cnVu?="}}),
                                  call));
  auto mismatch = [&](api::Header h, const Message& m, std::string_view names) {
    auto e = CheckModernHeaders(h, m);
    ASSERT_TRUE(e) << names;
    EXPECT_EQ(e->code, kHeaderMismatch);
    EXPECT_EQ(e->id, 3);
    EXPECT_NE(e->message.find(names), std::string::npos) << e->message;
  };
  mismatch(Headers({{"Mcp-Method", "tools/call"}, {"Mcp-Name", "run"}}), call,
           "MCP-Protocol-Version");
  mismatch(Headers({{"MCP-Protocol-Version", "2025-11-25"},
                    {"Mcp-Method", "tools/call"},
                    {"Mcp-Name", "run"}}),
           call, "MCP-Protocol-Version");
  mismatch(Headers({{"MCP-Protocol-Version", "2026-07-28"}, {"Mcp-Name", "run"}}), call,
           "Mcp-Method");
  mismatch(Headers({{"MCP-Protocol-Version", "2026-07-28"},
                    {"Mcp-Method", "tools/list"},
                    {"Mcp-Name", "run"}}),
           call, "Mcp-Method");
  mismatch(Headers({{"MCP-Protocol-Version", "2026-07-28"}, {"Mcp-Method", "tools/call"}}), call,
           "Mcp-Name");
  mismatch(Headers({{"MCP-Protocol-Version", "2026-07-28"},
                    {"Mcp-Method", "tools/call"},
                    {"Mcp-Name", "file_read"}}),
           call, "Mcp-Name");
  mismatch(Headers({{"MCP-Protocol-Version", "2026-07-28"},
                    {"Mcp-Method", "tools/call"},
                    {"Mcp-Name", "=?base64?not base64!?="}}),
           call, "base64");
  // Mcp-Name is for tools/call alone here.
  EXPECT_FALSE(CheckModernHeaders(
      Headers({{"MCP-Protocol-Version", "2026-07-28"}, {"Mcp-Method", "tools/list"}}),
      Modern("tools/list")));
}

TEST(EraHeaders, PickTheEraAndTheStatus) {
  const Message legacy = *Parse(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
  EXPECT_FALSE(ModernPost(Headers({{"MCP-Protocol-Version", "2025-11-25"}}), legacy));
  EXPECT_FALSE(ModernPost(Headers({}), legacy));
  EXPECT_TRUE(ModernPost(Headers({{"MCP-Protocol-Version", "2026-07-28"}}), legacy));
  EXPECT_TRUE(ModernPost(Headers({}), Modern("tools/list")));

  EXPECT_EQ(ModernStatus(Response(1, json::object())), 200);
  EXPECT_EQ(ModernStatus(ErrorResponse(RpcError{kMethodNotFound, "x", 1})), 404);
  EXPECT_EQ(ModernStatus(ErrorResponse(RpcError{kUnsupportedProtocolVersion, "x", 1})), 400);
  EXPECT_EQ(ModernStatus(ErrorResponse(RpcError{kHeaderMismatch, "x", 1})), 400);
  // An unknown tool is the body's error, as in the legacy era.
  EXPECT_EQ(ModernStatus(ErrorResponse(RpcError{kInvalidParams, "unknown tool", 1})), 200);
}

}  // namespace
}  // namespace cordon::mcp

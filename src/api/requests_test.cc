#include "api/requests.h"

#include <gtest/gtest.h>

namespace cordon::api {
namespace {

using nlohmann::json;

TEST(RequestsTest, ARunRequestBecomesASpec) {
  auto spec = ParseRun(json::parse(R"({
      "argv": ["/bin/echo", "hi"], "env": {"A": "1"}, "stdin_b64": "aGk=",
      "workspace": "/tmp", "require": ["memory"], "permissive": true, "isolation": "none",
      "limits": {"timeout_ms": 5, "grace_ms": 0, "output_limit_bytes": 7, "memory_bytes": 8,
                 "pids": 9, "cpu_seconds": 10, "file_size_bytes": 11, "open_files": 12}})"));
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->argv, (std::vector<std::string>{"/bin/echo", "hi"}));
  EXPECT_EQ(spec->env.at(0), (std::pair<std::string, std::string>{"A", "1"}));
  EXPECT_EQ(spec->stdin_bytes, "hi");
  EXPECT_EQ(spec->limits.timeout_ms, 5);
  EXPECT_EQ(spec->limits.grace_ms, 0);
  EXPECT_EQ(spec->limits.output_limit_bytes, 7);
  EXPECT_EQ(spec->limits.open_files, 12);
  EXPECT_TRUE(spec->permissive);
  EXPECT_TRUE(spec->required.contains(contain::Capability::kMemory));
  EXPECT_EQ(spec->owner, "api");
}

TEST(RequestsTest, ShapeErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"argv": "x"})", "argv"},
      {R"({"argv": [1]})", "argv"},
      {R"({"shell": 1})", "shell"},
      {R"({"env": {"A": 1}})", "env"},
      {R"({"limits": {"pids": 1.5}})", "limits.pids"},
      {R"({"limits": {"pids": 18446744073709551615}})", "limits.pids"},
      {R"({"limits": {"nope": 1}})", "limits.nope"},
      {R"({"require": "memory"})", "require"},
      {R"({"isolation": "full"})", "isolation"},
      {R"({"isolation": 1})", "isolation"},
      {R"({"stdin_b64": "abc"})", "stdin_b64"},
      {R"({"stdin_b64": "===="})", "stdin_b64"},  // EVP_DecodeBlock alone took it for a NUL
      {R"({"stdin_b64": " aGk"})", "stdin_b64"},
      {R"({"extra": 1})", "extra"},
  };
  for (const auto& [body, field] : cases) {
    auto spec = ParseRun(json::parse(body));
    ASSERT_FALSE(spec) << body;
    EXPECT_EQ(spec.error().status, 400);
    EXPECT_EQ(spec.error().field, field) << body;
  }
  EXPECT_FALSE(ParseObject("{"));
  EXPECT_FALSE(ParseObject("[]"));
  EXPECT_EQ(ParseSession(json::parse(R"({"kind": "jupyter"})")).error().field, "kind");
  EXPECT_EQ(ParseExec(json::parse(R"({"command": "x", "code": "y"})")).error().field, "code");
  EXPECT_EQ(ParseExec(json::parse(R"({"code": 1})")).error().field, "code");
  EXPECT_EQ(ParseSession(json::parse(R"({"ttl_s": -1})")).error().field, "ttl_s");
  EXPECT_EQ(ParseExec(json::parse(R"({"command": ""})")).error().field, "command");
  EXPECT_EQ(ParseExec(json::parse(R"({"command": "x", "timeout_ms": 0})")).error().field,
            "timeout_ms");
  for (const char* huge : {R"({"command": "x", "timeout_ms": 9223372036854775807})",
                           R"({"code": "1", "timeout_ms": 31536000001})"}) {
    EXPECT_EQ(ParseExec(json::parse(huge)).error().field, "timeout_ms") << huge;
  }
  EXPECT_TRUE(ParseExec(json::parse(R"({"command": "x", "timeout_ms": 31536000000})")));
}

TEST(RequestsTest, PythonSessionsTakeCode) {
  auto session = ParseSession(json::parse(R"({"id": "p", "kind": "python"})"));
  ASSERT_TRUE(session) << session.error().message;
  EXPECT_EQ(session->kind, "python");
  EXPECT_EQ(ParseSession(json::parse(R"({})"))->kind, "shell");
  auto call = ParseExec(json::parse(R"({"code": "1+1", "timeout_ms": 5})"));
  ASSERT_TRUE(call) << call.error().message;
  EXPECT_EQ(call->command, "1+1");
  EXPECT_EQ(call->timeout_ms, 5);
  // Empty code is an empty execution, not a missing field.
  EXPECT_TRUE(ParseExec(json::parse(R"({"code": ""})")));
}

}  // namespace
}  // namespace cordon::api

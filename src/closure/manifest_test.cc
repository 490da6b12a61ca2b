#include "closure/manifest.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "closure/sha256.h"
#include "sys/json_text.h"

namespace cordon::closure {
namespace {

using json = nlohmann::json;

const std::string kA(64, 'a');
const std::string kB = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

json EntryJson(const std::string& path, json sha = kA, json size = 1, json executable = false) {
  return {{"path", path}, {"sha256", sha}, {"size", size}, {"executable", executable}};
}

std::string ManifestText(const std::vector<json>& entries) {
  return sys::JsonText(json{{"entries", entries}});
}

// The rule a text is refused by; fails the test if it parses.
std::string RuleOf(const std::string& text) {
  auto parsed = ParseManifest(text);
  if (parsed) {
    ADD_FAILURE() << "parsed, but should not have: " << text;
    return "";
  }
  return std::string(RuleName(parsed.error().rule));
}

std::string RuleOfEntries(const std::vector<json>& entries) {
  return RuleOf(ManifestText(entries));
}

// The two-entry manifest whose canonical text and pin were computed with
// /usr/bin/python3 -c 'import json,hashlib; e=[...];
//   t=json.dumps(e,separators=(",",":"),ensure_ascii=False);
//   print(t, hashlib.sha256(t.encode()).hexdigest())'
const char kTwoEntries[] = R"({"entries": [
  {"path": "bin/tool", "sha256": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
   "size": 12, "executable": true},
  {"path": "lib/x.so", "sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
   "size": 0, "executable": false}
]})";
const char kTwoEntriesPin[] = "a244c9990bca3286bc3dec0a9c9922cd3c5cc28229c4f45950fc51031628c63b";

TEST(ManifestTest, ParsesAValidManifest) {
  auto m = ParseManifest(kTwoEntries);
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_EQ(m->entries.size(), 2u);
  EXPECT_EQ(m->entries[0], (Entry{"bin/tool", kA, 12, true}));
  EXPECT_EQ(m->entries[1], (Entry{"lib/x.so", kB, 0, false}));
}

TEST(ManifestTest, CanonicalTextIsPythonsCompactDump) {
  auto m = ParseManifest(kTwoEntries);
  ASSERT_TRUE(m);
  EXPECT_EQ(CanonicalText(*m),
            R"([{"path":"bin/tool","sha256":")" + kA +
                R"(","size":12,"executable":true},{"path":"lib/x.so","sha256":")" + kB +
                R"(","size":0,"executable":false}])");
  EXPECT_EQ(Pin(*m).value(), kTwoEntriesPin);
}

TEST(ManifestTest, PinOfNonAsciiPathsMatchesPython) {
  // The paths are UTF-8 in the file and stay unescaped in the canonical form.
  auto m = ParseManifest(ManifestText({
      EntryJson("donn\u00e9es/\u00fc.txt", kA, 3, false),
      EntryJson("\u65e5\u672c/\u8a9e", kB, json(uint64_t{18446744073709551615u}), true),
  }));
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(Pin(*m).value(), "ea6492eda6349015f98653471fddfbaacbf6dd81ac12ed740bfb20cb78800de6");
  // Escaped as \u sequences in the file: the same strings, the same pin.
  auto escaped =
      ParseManifest(R"({"entries":[{"path":"donn\u00e9es/\u00fc.txt","sha256":")" + kA +
                    R"(","size":3,"executable":false},{"path":"\u65e5\u672c/\u8a9e","sha256":")" +
                    kB + R"(","size":18446744073709551615,"executable":true}]})");
  ASSERT_TRUE(escaped) << escaped.error().message;
  EXPECT_EQ(Pin(*escaped).value(), Pin(*m).value());
}

TEST(ManifestTest, CanonicalEscapingMatchesPython) {
  // A quote, a backslash, a newline, U+0001 (escaped), U+007F and U+2028
  // (both left as they are by Python with ensure_ascii=False).
  const std::string path = "q\"uo\\te\nnl\x01\x7f\u2028";
  auto m = ParseManifest(ManifestText({EntryJson(path, kA, 1, false)}));
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(CanonicalText(*m), "[{\"path\":\"q\\\"uo\\\\te\\nnl\\u0001\x7f\u2028\",\"sha256\":\"" +
                                   kA + "\",\"size\":1,\"executable\":false}]");
  EXPECT_EQ(Pin(*m).value(), "77c5aefe0ecd37bbf16f0a2254314d0e14f1436402bbfb9bab7100fe77da6cc4");
}

TEST(ManifestTest, FormattingAndKeyOrderDoNotChangeThePin) {
  const std::string compact = R"({"entries":[{"path":"bin/tool","sha256":")" + kA +
                              R"(","size":12,"executable":true},{"path":"lib/x.so","sha256":")" +
                              kB + R"(","size":0,"executable":false}]})";
  const std::string reordered =
      "\n\n{ \"entries\" :\t[\n  { \"executable\" : true , \"size\" : 12,"
      "\"sha256\" : \"" +
      kA +
      "\", \"path\" : \"bin/tool\" },\n"
      "  {\"size\":0,\"path\":\"lib/x.so\",\"executable\":false,"
      "\"sha256\":\"" +
      kB + "\"}\n ]\n}\n";
  for (const std::string& text : {std::string(kTwoEntries), compact, reordered}) {
    auto m = ParseManifest(text);
    ASSERT_TRUE(m) << m.error().message;
    EXPECT_EQ(Pin(*m).value(), kTwoEntriesPin) << text;
    EXPECT_TRUE(ParsePinnedManifest(text, kTwoEntriesPin)) << text;
  }
}

TEST(ManifestTest, TheFilesOwnDigestIsNotAPin) {
  const std::string text = kTwoEntries;
  const std::string raw = Sha256Hex(text).value();
  ASSERT_NE(raw, kTwoEntriesPin);
  auto pinned = ParsePinnedManifest(text, raw);
  ASSERT_FALSE(pinned);
  EXPECT_EQ(RuleName(pinned.error().rule), "closure_pin");
  EXPECT_NE(pinned.error().message.find(kTwoEntriesPin), std::string::npos)
      << pinned.error().message;
  // Nor is the digest of the compact file, or of anything else.
  auto m = ParseManifest(text);
  ASSERT_TRUE(m);
  EXPECT_TRUE(CheckPin(*m, Sha256Hex(sys::JsonText(ToJson(*m))).value()));
  EXPECT_TRUE(CheckPin(*m, std::string(64, '0')));
  EXPECT_TRUE(CheckPin(*m, "not a pin"));
  EXPECT_FALSE(CheckPin(*m, kTwoEntriesPin));
}

TEST(ManifestTest, TheCanonicalFormIsNotItselfAManifest) {
  auto m = ParseManifest(kTwoEntries);
  ASSERT_TRUE(m);
  EXPECT_EQ(RuleOf(CanonicalText(*m)), "not_object");
}

TEST(ManifestTest, ToJsonRoundTrips) {
  auto m = ParseManifest(kTwoEntries);
  ASSERT_TRUE(m);
  auto again = ParseManifest(sys::JsonText(ToJson(*m), 2));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(*again, *m);
}

TEST(ManifestTest, RefusesEachInvalidTopLevelShape) {
  EXPECT_EQ(RuleOf(""), "invalid_json");
  EXPECT_EQ(RuleOf("{"), "invalid_json");
  EXPECT_EQ(RuleOf(std::string(kTwoEntries) + " {}"), "invalid_json");
  EXPECT_EQ(RuleOf("{\"entries\": [\"\xff\"]}"), "invalid_json");  // not UTF-8
  EXPECT_EQ(RuleOf("[]"), "not_object");
  EXPECT_EQ(RuleOf("null"), "not_object");
  EXPECT_EQ(RuleOf("\"entries\""), "not_object");
  EXPECT_EQ(RuleOf("42"), "not_object");
  EXPECT_EQ(RuleOf("{}"), "no_entries");
  EXPECT_EQ(RuleOf(R"({"entry": []})"), "no_entries");
  EXPECT_EQ(RuleOf(R"({"entries": {}})"), "entries_not_array");
  EXPECT_EQ(RuleOf(R"({"entries": null})"), "entries_not_array");
  EXPECT_EQ(RuleOf(R"({"entries": []})"), "empty_entries");
  EXPECT_EQ(RuleOf(sys::JsonText(json{{"entries", {EntryJson("a")}}, {"version", 1}})),
            "extra_key");
  EXPECT_EQ(RuleOf(R"({"entries": [3]})"), "entry_not_object");
  EXPECT_EQ(RuleOf(R"({"entries": [[]]})"), "entry_not_object");
}

TEST(ManifestTest, RefusesDuplicateKeys) {
  // nlohmann alone would keep the second "entries" and accept this.
  EXPECT_EQ(RuleOf(R"({"entries": [], "entries": )" + ManifestText({EntryJson("a")}) + "}"),
            "duplicate_key");
  EXPECT_EQ(RuleOf(R"({"entries": [{"path": "a", "path": "b", "sha256": ")" + kA +
                   R"(", "size": 1, "executable": false}]})"),
            "duplicate_key");
}

TEST(ManifestTest, RefusesAnExtraKeyInAnEntry) {
  json entry = EntryJson("a");
  entry["mode"] = 0755;
  auto parsed = ParseManifest(ManifestText({EntryJson("0"), entry}));
  ASSERT_FALSE(parsed);
  EXPECT_EQ(RuleName(parsed.error().rule), "extra_key");
  EXPECT_EQ(parsed.error().path, "a");
  EXPECT_NE(parsed.error().message.find("entries[1]"), std::string::npos);
  EXPECT_NE(parsed.error().message.find("\"mode\""), std::string::npos);
}

TEST(ManifestTest, RefusesBadPaths) {
  EXPECT_EQ(RuleOfEntries({EntryJson("/etc/passwd")}), "path_absolute");
  EXPECT_EQ(RuleOfEntries({EntryJson("..")}), "path_traversal");
  EXPECT_EQ(RuleOfEntries({EntryJson("../x")}), "path_traversal");
  EXPECT_EQ(RuleOfEntries({EntryJson("a/../../x")}), "path_traversal");
  EXPECT_EQ(RuleOfEntries({EntryJson("a/..")}), "path_traversal");
  EXPECT_EQ(RuleOfEntries({EntryJson("")}), "path_empty_segment");
  EXPECT_EQ(RuleOfEntries({EntryJson("a//b")}), "path_empty_segment");
  EXPECT_EQ(RuleOfEntries({EntryJson("a/")}), "path_empty_segment");
  EXPECT_EQ(RuleOfEntries({EntryJson("./a")}), "path_dot_segment");
  EXPECT_EQ(RuleOfEntries({EntryJson("a/./b")}), "path_dot_segment");
  EXPECT_EQ(RuleOfEntries({EntryJson(std::string("a\0b", 3))}), "path_nul");
  EXPECT_EQ(RuleOfEntries({EntryJson(".cordon")}), "path_reserved");
  EXPECT_EQ(RuleOfEntries({EntryJson(".cordon/manifest.json")}), "path_reserved");
  EXPECT_EQ(RuleOfEntries({EntryJson(".cordon-pin")}), "path_reserved");
  json not_string = EntryJson("a");
  not_string["path"] = 3;
  EXPECT_EQ(RuleOfEntries({not_string}), "bad_path");
  json no_path = EntryJson("a");
  no_path.erase("path");
  EXPECT_EQ(RuleOfEntries({no_path}), "bad_path");
}

TEST(ManifestTest, ReservedMeansAtTheStartOnly) {
  // ".." inside a name and ".cordon" below the top are ordinary names.
  EXPECT_TRUE(ParseManifest(
      ManifestText({EntryJson("a..b"), EntryJson("lib/.cordon"), EntryJson("x.cordon")})));
}

TEST(ManifestTest, PathMessagesNameTheEntry) {
  auto parsed = ParseManifest(ManifestText({EntryJson("a"), EntryJson("b/../../etc/shadow")}));
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().path, "b/../../etc/shadow");
  EXPECT_NE(parsed.error().message.find("entries[1]"), std::string::npos);
  EXPECT_NE(parsed.error().message.find("b/../../etc/shadow"), std::string::npos);
}

TEST(ManifestTest, RefusesDuplicateAndUnsortedPaths) {
  EXPECT_EQ(RuleOfEntries({EntryJson("a"), EntryJson("a")}), "duplicate_path");
  EXPECT_EQ(RuleOfEntries({EntryJson("a"), EntryJson("b"), EntryJson("a")}), "duplicate_path");
  EXPECT_EQ(RuleOfEntries({EntryJson("b"), EntryJson("a")}), "unsorted");
  // Bytewise: '/' (0x2f) sorts after '-' (0x2d), 'B' before 'a', and any
  // ASCII byte before the lead byte of a multi-byte character.
  EXPECT_EQ(RuleOfEntries({EntryJson("a/b"), EntryJson("a-b")}), "unsorted");
  EXPECT_EQ(RuleOfEntries({EntryJson("a"), EntryJson("B")}), "unsorted");
  EXPECT_EQ(RuleOfEntries({EntryJson("\u00e9"), EntryJson("z")}), "unsorted");
  EXPECT_TRUE(ParseManifest(ManifestText(
      {EntryJson("B"), EntryJson("a-b"), EntryJson("a/b"), EntryJson("z"), EntryJson("\u00e9")})));
}

TEST(ManifestTest, RefusesAFileThatIsAlsoADirectory) {
  EXPECT_EQ(RuleOfEntries({EntryJson("a"), EntryJson("a-b"), EntryJson("a/b")}), "path_conflict");
}

TEST(ManifestTest, SizeMustBeANonNegativeInteger) {
  for (json bad : {json(true), json(false), json(-1), json(1.5), json(1.0), json("3"),
                   json(nullptr), json::array(), json::object()}) {
    EXPECT_EQ(RuleOfEntries({EntryJson("a", kA, bad)}), "bad_size") << bad;
  }
  json missing = EntryJson("a");
  missing.erase("size");
  EXPECT_EQ(RuleOfEntries({missing}), "bad_size");
  EXPECT_EQ(RuleOf(R"({"entries":[{"path":"a","sha256":")" + kA +
                   R"(","size":18446744073709551616,"executable":false}]})"),
            "bad_size");  // past uint64: parsed as a float
  auto zero = ParseManifest(ManifestText({EntryJson("a", kA, 0)}));
  ASSERT_TRUE(zero);
  EXPECT_EQ(zero->entries[0].size, 0u);
}

TEST(ManifestTest, ExecutableMustBeABoolean) {
  for (json bad : {json(1), json(0), json("true"), json(nullptr)}) {
    EXPECT_EQ(RuleOfEntries({EntryJson("a", kA, 1, bad)}), "bad_executable") << bad;
  }
  json missing = EntryJson("a");
  missing.erase("executable");
  EXPECT_EQ(RuleOfEntries({missing}), "bad_executable");
}

TEST(ManifestTest, Sha256MustBe64LowercaseHexDigits) {
  std::string upper(64, 'A');
  for (json bad : {json(upper), json(std::string(63, 'a')), json(std::string(65, 'a')),
                   json(std::string(64, 'g')), json(3), json(nullptr)}) {
    EXPECT_EQ(RuleOfEntries({EntryJson("a", bad)}), "bad_sha256") << bad;
  }
  json missing = EntryJson("a");
  missing.erase("sha256");
  EXPECT_EQ(RuleOfEntries({missing}), "bad_sha256");
}

TEST(ManifestTest, PathProblemAcceptsOrdinaryPaths) {
  for (const char* ok :
       {"a", "a/b/c", "lib/python3.11/site-packages/x.py", ".hidden", "a b", "...", "\u00fc"}) {
    EXPECT_FALSE(PathProblem(ok)) << ok;
  }
  EXPECT_EQ(PathProblem("\xc3\x28").value().rule, Rule::kBadPath);  // not UTF-8
  EXPECT_EQ(PathProblem("\xc0\xaf").value().rule, Rule::kBadPath);  // overlong '/'
}

}  // namespace
}  // namespace cordon::closure

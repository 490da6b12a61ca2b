// The kernel websocket framings (jupyter/ws_framing.h) against bytes laid
// out by hand from jupyter_server's serialize_binary_message and
// serialize_msg_to_ws_v1, and against frames that lie about their sizes.
// (In cordon_unit_tests: the framing is in cordon_lib; the relay that uses
// it is driven over a real daemon in tests/integration/test_gateway.py.)
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "jupyter/ws_framing.h"

namespace cordon::jupyter {
namespace {

std::string Be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string Le64(uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

TEST(BinaryJsonFrameTest, EncodesAsJupyterServer) {
  // nbufs = 3 (the JSON and two buffers), offsets from the frame's start.
  const std::string json = R"({"a":1})";
  const std::string expected = Be32(3) + Be32(16) + Be32(16 + 7) + Be32(16 + 7 + 3) + json +
                               std::string("\x00\x01\x02", 3) + "zz";
  EXPECT_EQ(EncodeBinaryJson(json, {std::string("\x00\x01\x02", 3), "zz"}), expected);
}

TEST(BinaryJsonFrameTest, RoundTripsBuffersWithNulsAndEmptyOnes) {
  const std::vector<std::string> buffers = {std::string("\x00\xff\x00", 3), "", "last"};
  std::string frame = EncodeBinaryJson("{}", buffers);
  auto decoded = DecodeBinaryJson(frame);
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->json, "{}");
  ASSERT_EQ(decoded->buffers.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(decoded->buffers[i], buffers[i]);
}

TEST(BinaryJsonFrameTest, OnlyTheJsonIsOnePart) {
  // The decoded parts are views of the frame: it must outlive them.
  const std::string frame = Be32(1) + Be32(8) + "{}";
  auto decoded = DecodeBinaryJson(frame);
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->json, "{}");
  EXPECT_TRUE(decoded->buffers.empty());
}

TEST(BinaryJsonFrameTest, RefusesFramesThatLieAboutTheirSize) {
  struct Case {
    const char* what;
    std::string frame;
    const char* says;
  };
  const Case cases[] = {
      {"too short", std::string("\x00\x00", 2), "part count"},
      {"no parts", Be32(0) + Be32(8), "part count is 0"},
      {"table past the end", Be32(1000) + Be32(8), "offset table"},
      {"count near 2^32", Be32(0xffffffff) + Be32(8), "offset table"},
      {"offset past the end", Be32(2) + Be32(12) + Be32(99) + "{}", "past the frame's end"},
      {"offset into the table", Be32(1) + Be32(4) + "{}", "before the end of the offset table"},
      {"offsets going back", Be32(2) + Be32(14) + Be32(12) + "{}xx", "before offset 0"},
  };
  for (const Case& c : cases) {
    auto decoded = DecodeBinaryJson(c.frame);
    ASSERT_FALSE(decoded) << c.what;
    EXPECT_NE(decoded.error().find(c.says), std::string::npos) << c.what << ": " << decoded.error();
  }
}

TEST(V1FrameTest, EncodesAsJupyterServer) {
  // 7 offsets (one buffer): channel at 8 * 8 = 64.
  const std::string expected = Le64(7) + Le64(64) + Le64(69) + Le64(71) + Le64(73) + Le64(75) +
                               Le64(77) + Le64(80) + "shell" + "{}" + "{}" + "{}" + "{}" + "buf";
  EXPECT_EQ(EncodeV1("shell", {"{}", "{}", "{}", "{}"}, {"buf"}), expected);
}

TEST(V1FrameTest, RoundTrips) {
  const std::vector<std::string> buffers = {std::string("\x00\x01", 2), "",
                                            std::string(70000, 'b')};
  std::string frame = EncodeV1("iopub", {R"({"msg_type":"x"})", "{}", R"({"m":1})", "[]"}, buffers);
  auto decoded = DecodeV1(frame);
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->channel, "iopub");
  EXPECT_EQ(decoded->parts[0], R"({"msg_type":"x"})");
  EXPECT_EQ(decoded->parts[1], "{}");
  EXPECT_EQ(decoded->parts[2], R"({"m":1})");
  EXPECT_EQ(decoded->parts[3], "[]");
  ASSERT_EQ(decoded->buffers.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(decoded->buffers[i], buffers[i]);
}

TEST(V1FrameTest, NoBuffers) {
  const std::string frame = EncodeV1("control", {"{}", "{}", "{}", "{}"}, {});
  auto decoded = DecodeV1(frame);
  ASSERT_TRUE(decoded) << decoded.error();
  EXPECT_EQ(decoded->channel, "control");
  EXPECT_TRUE(decoded->buffers.empty());
}

TEST(V1FrameTest, RefusesFramesThatLieAboutTheirSize) {
  std::string good = EncodeV1("shell", {"{}", "{}", "{}", "{}"}, {});
  std::string past_end = good;
  past_end.replace(8 * 6, 8, Le64(1000));  // the end offset
  std::string backwards = good;
  backwards.replace(8 * 3, 8, Le64(60));  // the header's start, before the channel's end
  struct Case {
    const char* what;
    std::string frame;
    const char* says;
  };
  const Case cases[] = {
      {"too short", "abc", "offset count"},
      {"fewer than six offsets", Le64(5) + std::string(40, '\0'), "at least 6"},
      {"a count that would wrap", Le64(uint64_t{1} << 61) + std::string(64, '\0'), "at least 6"},
      {"a table past the end", Le64(6) + std::string(40, '\0'), "offsets"},
      {"an offset past the end", past_end, "past the frame's end"},
      {"offsets going back", backwards, "before offset"},
  };
  for (const Case& c : cases) {
    auto decoded = DecodeV1(c.frame);
    ASSERT_FALSE(decoded) << c.what;
    EXPECT_NE(decoded.error().find(c.says), std::string::npos) << c.what << ": " << decoded.error();
  }
}

}  // namespace
}  // namespace cordon::jupyter

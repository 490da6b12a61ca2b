// A shell session's output framing (session::FrameReader), and the quoting
// of the command it runs (session::AnsiCQuote). The first byte chooses the
// stream (bit 0: stdout, whose marker carries a status) and the chunk size
// the rest is fed in (the other bits; 0: all at once); the rest is what the
// shell printed. The nonce is fixed, as if the fuzzer had guessed it.
//
// Properties: how the bytes are chunked changes nothing (output, done,
// status); what is passed to the execution is the stream before the marker
// (all of it, after Flush, when no marker came); AnsiCQuote's output holds
// only safe bytes and decodes back to the input.
#include "fuzz_support.h"
#include "session/framing.h"

namespace {

constexpr std::string_view kNonce = "cordon-end-0123456789abcdef0123456789abcdef";

struct Fed {
  std::string out;
  bool done = false;
  std::optional<int> status;
};

Fed Run(std::string_view stream, bool with_status, size_t chunk) {
  cordon::session::FrameReader reader;
  reader.Expect(std::string(kNonce), with_status);
  Fed fed;
  auto out = [&](std::string_view bytes) { fed.out.append(bytes); };
  if (chunk == 0) chunk = stream.size() + 1;
  for (size_t at = 0; at < stream.size() && !fed.done; at += chunk) {
    fed.done = reader.Feed(stream.substr(at, chunk), out);
    CORDON_FUZZ_CHECK(fed.done == reader.done());
  }
  if (!fed.done) reader.Flush(out);
  fed.status = reader.status();
  return fed;
}

std::string Unquote(std::string_view quoted) {
  CORDON_FUZZ_CHECK(quoted.starts_with("$'") && quoted.ends_with("'") && quoted.size() >= 3);
  quoted = quoted.substr(2, quoted.size() - 3);
  std::string out;
  for (size_t i = 0; i < quoted.size(); ++i) {
    char c = quoted[i];
    CORDON_FUZZ_CHECK(c != '\'' && c != '\n' && c != '$' && c != '`' && c != '"');
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    CORDON_FUZZ_CHECK(i + 3 < quoted.size() && quoted[i + 1] == 'x');
    out.push_back(static_cast<char>(std::stoi(std::string(quoted.substr(i + 2, 2)), nullptr, 16)));
    i += 3;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  if (size == 0) return 0;
  const bool with_status = data[0] & 1;
  const size_t chunk = data[0] >> 1;
  std::string_view stream = fuzz::Text(data + 1, size - 1);

  Fed whole = Run(stream, with_status, 0);
  Fed chunked = Run(stream, with_status, chunk);
  CORDON_FUZZ_CHECK(whole.out == chunked.out);
  CORDON_FUZZ_CHECK(whole.done == chunked.done);
  CORDON_FUZZ_CHECK(whole.status == chunked.status);
  size_t at = stream.find(kNonce);
  if (whole.done) {
    CORDON_FUZZ_CHECK(at != std::string_view::npos && whole.out == stream.substr(0, at));
  } else {
    CORDON_FUZZ_CHECK(whole.out == stream && !whole.status);
  }
  if (!with_status) CORDON_FUZZ_CHECK(!whole.status);

  if (stream.find('\0') == std::string_view::npos) {
    std::string quoted = session::AnsiCQuote(stream);
    CORDON_FUZZ_CHECK(Unquote(quoted) == stream);
  }
  return 0;
}

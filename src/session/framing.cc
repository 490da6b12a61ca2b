#include "session/framing.h"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "sys/random.h"

namespace cordon::session {
namespace {

bool Safe(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case ' ':
    case '_':
    case '.':
    case '/':
    case ',':
    case ':':
    case '=':
    case '+':
    case '@':
    case '%':
    case '^':
    case '-':
      return true;
  }
  return false;
}

}  // namespace

std::string AnsiCQuote(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "$'";
  out.reserve(bytes.size() + 3);
  for (char ch : bytes) {
    auto c = static_cast<unsigned char>(ch);
    if (Safe(c)) {
      out.push_back(ch);
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  out.push_back('\'');
  return out;
}

std::string NewNonce() { return "cordon-end-" + sys::RandomHex(16); }

std::string MarkerLines(const std::string& nonce) {
  return "builtin printf '%s %d\\n' " + nonce + " \"$?\" >&${" + std::string(kMarkerOut) +
         ":-1}\nbuiltin printf '%s\\n' " + nonce + " >&${" + std::string(kMarkerErr) + ":-2}\n";
}

std::string MarkerDescriptors() {
  // `{name}>&1` has bash take the lowest free descriptor from 10 and name
  // it; where none is left (a low RLIMIT_NOFILE) the names stay unset and
  // the markers go to 1 and 2, as without them. Read-only, so a command
  // cannot point them elsewhere; a redirection error goes to the bootstrap's
  // output, which no execution sees.
  return "exec {" + std::string(kMarkerOut) + "}>&1 {" + std::string(kMarkerErr) +
         "}>&2\nreadonly " + std::string(kMarkerOut) + " " + std::string(kMarkerErr) + "\n";
}

void FrameReader::Expect(std::string nonce, bool with_status) {
  nonce_ = std::move(nonce);
  with_status_ = with_status;
  done_ = false;
  status_.reset();
  pending_.clear();
}

void FrameReader::Reset() {
  nonce_.clear();
  done_ = false;
  pending_.clear();
}

bool FrameReader::Feed(std::string_view chunk, const std::function<void(std::string_view)>& out) {
  if (nonce_.empty() || done_) return done_;
  pending_.append(chunk);
  size_t at = pending_.find(nonce_);
  if (at == std::string::npos) {
    // Keep back only a tail that may be the start of the marker (the
    // longest suffix that is a prefix of the nonce): the rest is passed on
    // at once, so a caller sees a line as soon as it comes (progress).
    const std::string_view held(pending_), nonce(nonce_);
    size_t keep = std::min(held.size(), nonce.size() - 1);
    while (keep > 0 && !held.ends_with(nonce.substr(0, keep))) --keep;
    out(std::string_view(pending_).substr(0, pending_.size() - keep));
    pending_.erase(0, pending_.size() - keep);
    return false;
  }
  out(std::string_view(pending_).substr(0, at));
  pending_.erase(0, at);
  size_t end = pending_.find('\n', nonce_.size());
  if (end == std::string::npos) return false;  // the rest of the marker line is still coming
  if (with_status_) {
    // "<nonce> <status>"
    std::string_view digits = std::string_view(pending_).substr(nonce_.size());
    digits = digits.substr(0, end - nonce_.size());
    if (!digits.empty() && digits.front() == ' ') digits.remove_prefix(1);
    int value = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec == std::errc()) status_ = value;
  }
  pending_.clear();
  done_ = true;
  return true;
}

void FrameReader::Flush(const std::function<void(std::string_view)>& out) {
  if (!nonce_.empty() && !done_ && !pending_.empty()) out(pending_);
  pending_.clear();
}

}  // namespace cordon::session

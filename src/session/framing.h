// How a session's persistent shell is driven and how its output is split
// per execution. The daemon writes each command to the shell's stdin as one
// line, `eval $'...'` with every byte outside a small safe set written as
// \xHH (so no byte of the command can end the line or the quoting), and the
// end markers on the *next* lines: a fresh random nonce per execution,
// printed by the shell only after the command is done. The command never has
// the nonce in scope (the shell has not read those lines yet), so output that
// imitates a marker, or repeats an earlier one, cannot end its execution
// early.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace cordon::session {

// `$'...'`: bash's ANSI-C quoting of `bytes`. Bytes outside [A-Za-z0-9 _./,:=+@%^-]
// are \xHH (always two digits, so a following hex digit cannot join them).
// `bytes` must not contain NUL (a bash string cannot hold it).
std::string AnsiCQuote(std::string_view bytes);

// "cordon-end-" and 32 random hex digits.
std::string NewNonce();

// The shell variables naming the descriptors the end markers are written to:
// copies of the shell's own stdout and stderr, made at its start, so that a
// command that moves or closes its shell's stdout or stderr (`exec
// 2>/dev/null`, `exec >log`, `exec 1>&-`) does not take the markers with it.
inline constexpr std::string_view kMarkerOut = "__cordon_marker_out";
inline constexpr std::string_view kMarkerErr = "__cordon_marker_err";

// The lines that make a shell keep those copies: sent once, first.
std::string MarkerDescriptors();

// The lines that make the shell print the end markers for `nonce`: on
// stdout "<nonce> <status>\n" (the status of the command before them), on
// stderr "<nonce>\n", each through its copy where the shell has one. Builtins only, so a function
// or alias named printf cannot interfere. One line each: a SIGINT that lands while bash runs a
// command substitution can abort the command and then, once more, the next
// line after its first command has run; with both markers on one line, the
// stderr marker never came and the execution never ended.
std::string MarkerLines(const std::string& nonce);

// One stream of the shell's output, split at the current execution's end
// marker. Bytes that arrive while no execution expects output (startup
// noise, a background job writing between executions, anything after a
// marker) are dropped.
class FrameReader final {
 public:
  // Expects the marker for `nonce`; `with_status`: the stdout form.
  void Expect(std::string nonce, bool with_status);
  void Reset();  // nothing is expected

  // Feeds bytes read from the stream; the execution's own bytes go to `out`.
  // Returns true once the marker is complete (then done() is true).
  bool Feed(std::string_view chunk, const std::function<void(std::string_view)>& out);
  // The shell ended: bytes held back (a tail that might have begun a
  // marker) are the execution's after all.
  void Flush(const std::function<void(std::string_view)>& out);

  bool expecting() const { return !nonce_.empty(); }
  bool done() const { return done_; }
  std::optional<int> status() const { return status_; }

 private:
  std::string nonce_;
  bool with_status_ = false;
  bool done_ = false;
  std::optional<int> status_;
  std::string pending_;
};

}  // namespace cordon::session

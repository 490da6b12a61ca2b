// cordon closure: make, pin and verify pinned runtime closures.
#include <unistd.h>

#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "closure/make.h"
#include "closure/manifest.h"
#include "closure/sha256.h"
#include "closure/verify.h"
#include "sys/fd.h"
#include "sys/json_text.h"

namespace cordon::cli {
namespace {

// An invalid manifest or a closure that does not verify: an answer about the
// closure, not a failure of cordon (125 stays for usage errors and cordon's
// own failures, DESIGN.md §5).
constexpr int kExitRefused = 1;

struct ClosureArgs {
  CLI::App* make = nullptr;
  CLI::App* pin = nullptr;
  CLI::App* verify = nullptr;
  std::string dir;
  std::string manifest_file;
  std::string pin_hex;
  bool json = false;
  bool allow_unlisted = false;
};

void PrintFailure(std::string_view command, const closure::Failure& f) {
  PrintError(command, std::string(closure::RuleName(f.rule)) + ": " + f.message);
}

// A usage error: what the user typed cannot be acted on at all.
int Usage(std::string_view command, bool json, const std::string& message) {
  if (json) {
    PrintJson({{"error", {{"code", "invalid"}, {"message", message}}}});
  } else {
    PrintError(command, message + " (see cordon " + std::string(command) + " --help)");
  }
  return kExitCordonFailed;
}

int Make(const ClosureArgs& a) {
  constexpr std::string_view kName = "closure make";
  auto made = closure::MakeManifest(a.dir);
  if (!made) return Usage(kName, false, "DIR: " + made.error().message());
  if (!made->ok()) {
    for (const auto& f : made->problems) PrintFailure(kName, f);
    PrintError(kName, a.dir + " cannot be made into a closure: " +
                          std::to_string(made->problems.size()) + " problem(s) above");
    return kExitRefused;
  }
  (void)sys::WriteAll(STDOUT_FILENO, sys::JsonText(closure::ToJson(made->manifest), 2) + "\n");
  if (!made->writable.empty()) {
    PrintError(kName, "note: " + std::to_string(made->writable.size()) +
                          " file(s) are writable (first: " + made->writable.front() +
                          "); verification refuses writable files, so run chmod -R a-w on the "
                          "closure before verifying it");
  }
  return 0;
}

int Pin(const ClosureArgs& a) {
  constexpr std::string_view kName = "closure pin";
  auto text = closure::ReadManifestText(a.manifest_file);
  if (!text) return Usage(kName, a.json, "FILE: " + text.error().message());
  auto manifest = closure::ParseManifest(*text);
  if (!manifest) {
    if (a.json) {
      PrintJson({{"error", closure::ToJson(manifest.error())}});
    } else {
      PrintFailure(kName, manifest.error());
    }
    return kExitRefused;
  }
  auto pin = closure::Pin(*manifest);
  if (!pin) {
    PrintError(kName, pin.error().message());
    return kExitCordonFailed;
  }
  if (a.json) {
    PrintJson({{"pin", *pin}});
  } else {
    (void)sys::WriteAll(STDOUT_FILENO, *pin + "\n");
  }
  return 0;
}

int Verify(const ClosureArgs& a) {
  constexpr std::string_view kName = "closure verify";
  if (!closure::IsSha256Hex(a.pin_hex)) {
    return Usage(kName, a.json,
                 "--pin: '" + a.pin_hex + "' is not a pin: it must be 64 lowercase hex digits");
  }
  auto text = closure::ReadManifestText(a.manifest_file);
  if (!text) return Usage(kName, a.json, "FILE: " + text.error().message());

  closure::Verification verification;
  if (auto manifest = closure::ParseManifest(*text); !manifest) {
    verification.failures.push_back(std::move(manifest).error());
  } else {
    auto verified = closure::VerifyClosure(
        a.dir, *manifest, a.pin_hex, closure::VerifyOptions{.allow_unlisted = a.allow_unlisted});
    if (!verified) return Usage(kName, a.json, "DIR: " + verified.error().message());
    verification = std::move(*verified);
  }

  if (a.json) {
    PrintJson(closure::ToJson(verification));
  } else if (verification.ok()) {
    for (const auto& path : verification.unlisted) {
      PrintError(kName, "note: unlisted (allowed by --allow-unlisted): " + path);
    }
    (void)sys::WriteAll(STDOUT_FILENO, "ok: " + std::to_string(verification.files.size()) +
                                           " file(s) verified against pin " + a.pin_hex + "\n");
  } else {
    for (const auto& f : verification.failures) PrintFailure(kName, f);
  }
  return verification.ok() ? 0 : kExitRefused;
}

}  // namespace

Command AddClosureCommand(CLI::App& app) {
  auto args = std::make_shared<ClosureArgs>();
  ClosureArgs& a = *args;
  CLI::App* cmd = app.add_subcommand(
      "closure",
      "Pinned runtime closures: a manifest of files (path, sha256, size, executable) whose "
      "canonical digest, the pin, names exactly one set of file contents.");
  cmd->require_subcommand(1);
  cmd->footer(
      "Exit status: 0 on success; 1 when a manifest is invalid or a closure does not verify "
      "(each reason printed with its rule code); 125 on usage errors (an unreadable file or "
      "directory, a malformed --pin).");

  a.make = cmd->add_subcommand(
      "make",
      "Print the manifest of every regular file beneath DIR (JSON). Symlinks, special files "
      "and empty directories are reported as problems, not skipped.");
  a.make->add_option("DIR", a.dir, "The closure directory")->required();

  a.pin = cmd->add_subcommand(
      "pin",
      "Validate the manifest in FILE and print its pin: the SHA-256 of its canonical entries "
      "(64 lowercase hex digits), independent of the file's formatting and key order.");
  a.pin->add_option("FILE", a.manifest_file, "The manifest file")->required();
  a.pin->add_flag("--json", a.json, "Print {\"pin\": ...} or {\"error\": {rule, path, message}}");

  a.verify = cmd->add_subcommand(
      "verify",
      "Check that DIR holds exactly the files of the manifest in FILE, whose pin must be "
      "HEX: regular files reached without symlinks, not writable, with the listed size, "
      "SHA-256 and executable bit, unchanged while read, and nothing unlisted.");
  a.verify->add_option("DIR", a.dir, "The closure directory")->required();
  a.verify->add_option("FILE", a.manifest_file, "The manifest file")->required();
  a.verify->add_option("--pin", a.pin_hex, "The expected pin (64 lowercase hex digits)")
      ->type_name("HEX")
      ->required();
  a.verify->add_flag("--json", a.json,
                     "Print {\"ok\", \"failures\": [{rule, path, message}], \"unlisted\"}");
  a.verify->add_flag("--allow-unlisted", a.allow_unlisted,
                     "Pass even if DIR holds files the manifest does not list (they are still "
                     "reported). Weakens the closure: anything unlisted is unverified");

  return Command{cmd, [args] {
                   const ClosureArgs& a = *args;
                   if (a.make->parsed()) return Make(a);
                   if (a.pin->parsed()) return Pin(a);
                   if (a.verify->parsed()) return Verify(a);
                   return kExitCordonFailed;
                 }};
}

}  // namespace cordon::cli

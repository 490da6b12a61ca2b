// cordon attest: prove which process runs what, below a process cordon
// launched; cordon signal: signal exactly the process an identity names.
#include <signal.h>
#include <string.h>

#include <cctype>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/units.h"
#include "closure/sha256.h"
#include "proc/attest.h"
#include "proc/signal_identity.h"

namespace cordon::cli {
namespace {

struct AttestArgs {
  std::string root, target, title, exe_sha256, closure, pin, cwd;
  bool json = false;
  CLI::App* cmd = nullptr;
  bool Given(const std::string& name) const { return cmd->get_option(name)->count() > 0; }
};

int Attest(const AttestArgs& a) {
  auto bad = [](const std::string& message) {
    PrintError("attest", message);
    return kExitCordonFailed;
  };
  auto root = proc::IdentityFromJsonText(a.root);
  if (!root) return bad("--root-identity: " + root.error());
  proc::AttestExpectations expect;
  if (a.Given("--target-identity")) {
    auto target = proc::IdentityFromJsonText(a.target);
    if (!target) return bad("--target-identity: " + target.error());
    expect.target = *target;
  }
  if (a.Given("--expect-title")) expect.title = a.title;
  if (a.Given("--expect-cwd")) expect.cwd = a.cwd;
  if (a.Given("--expect-exe-sha256")) {
    if (!closure::IsSha256Hex(a.exe_sha256)) {
      return bad("--expect-exe-sha256: expected 64 lowercase hex digits");
    }
    expect.exe_sha256 = a.exe_sha256;
  }
  std::optional<closure::Verification> verified;
  if (a.Given("--closure")) {
    if (expect.exe_sha256) return bad("give --expect-exe-sha256 or --closure, not both");
    auto v = VerifyClosureOption(a.closure, a.Given("--pin"), a.pin);
    if (!v) return bad(v.error());
    verified = std::move(*v);
    expect.closure = &*verified;
  }
  auto chain = proc::Attest(*root, expect);
  if (!chain) {
    if (a.json) {
      PrintJson(
          {{"error", {{"reason", chain.error().reason}, {"message", chain.error().message}}}});
    } else {
      PrintError("attest", chain.error().reason + ": " + chain.error().message);
    }
    return 1;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& id : *chain) out.push_back(proc::ToJson(id));
  if (a.json) {
    PrintJson(out);
  } else {
    for (const auto& id : *chain) {
      std::vector<std::string> argv = proc::ReadArgv(id.pid);
      std::printf("%-8d %-8d %-12llu %s\n", id.pid, id.ppid,
                  static_cast<unsigned long long>(id.start_ticks),
                  argv.empty() ? "" : argv[0].c_str());
    }
  }
  return 0;
}

// "TERM", "SIGTERM", "term" or "15".
std::optional<int> ParseSignal(std::string text) {
  if (auto n = ParseCount(text)) {
    if (*n >= 1 && *n < NSIG) return static_cast<int>(*n);
    return std::nullopt;
  }
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (text.starts_with("SIG")) text = text.substr(3);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (const char* name = ::sigabbrev_np(sig); name != nullptr && text == name) return sig;
  }
  return std::nullopt;
}

struct SignalArgs {
  std::string identity;
  std::string signal;
  bool check_parent = false;
  bool json = false;
};

int Signal(const SignalArgs& a) {
  auto id = proc::IdentityFromJsonText(a.identity);
  if (!id) {
    PrintError("signal", "--identity: " + id.error());
    return kExitCordonFailed;
  }
  auto sig = ParseSignal(a.signal);
  if (!sig) {
    PrintError("signal", "SIG: '" + a.signal + "' is not a signal name (TERM, SIGKILL) or number");
    return kExitCordonFailed;
  }
  auto verdict = proc::SignalIdentity(*id, *sig, a.check_parent);
  if (!verdict) {
    PrintError("signal", verdict.error().message());
    return kExitCordonFailed;
  }
  bool sent = *verdict == proc::Mismatch::kNone;
  if (a.json) {
    PrintJson({{"sent", sent},
               {"reason", sent ? nlohmann::json() : nlohmann::json(proc::MismatchName(*verdict))}});
  } else if (!sent) {
    PrintError("signal", "not signalled: " + std::string(proc::MismatchName(*verdict)));
  }
  return sent ? 0 : 1;
}

}  // namespace

Command AddAttestCommand(CLI::App& app) {
  auto args = std::make_shared<AttestArgs>();
  CLI::App* cmd = app.add_subcommand(
      "attest",
      "Find the descendant of a process that matches every expectation and print the chain of "
      "identities from it up to that process, target first. Exit 0 when attested, 1 when "
      "rejected (the reason is printed), 125 on bad input.");
  args->cmd = cmd;
  cmd->add_option("--root-identity", args->root,
                  "The root: {\"pid\", \"ppid\", \"start_ticks\", \"boot_id\"}")
      ->required()
      ->type_name("JSON");
  cmd->add_option("--target-identity", args->target, "That very process, instead of searching")
      ->type_name("JSON");
  cmd->add_option("--expect-title", args->title, "argv[0] as the process shows it now")
      ->type_name("NAME");
  cmd->add_option("--expect-exe-sha256", args->exe_sha256, "SHA-256 of its executable")
      ->type_name("HEX");
  cmd->add_option("--closure", args->closure, "Its executable is a file of this closure")
      ->type_name("DIR");
  cmd->add_option("--pin", args->pin, "The closure's pin")->type_name("HEX");
  cmd->add_option("--expect-cwd", args->cwd, "Its working directory")->type_name("PATH");
  cmd->add_flag("--json", args->json, "Print the chain as a JSON array of identities");
  return Command{cmd, [args] { return Attest(*args); }};
}

Command AddSignalCommand(CLI::App& app) {
  auto args = std::make_shared<SignalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "signal",
      "Send SIG to exactly the process an identity names: its pid is pinned with a pidfd and "
      "the identity checked again before the signal; a recycled pid is never signalled. Exit 0 "
      "when sent, 1 when not (the reason is printed), 125 on bad input.");
  cmd->add_option("--identity", args->identity,
                  "{\"pid\", \"ppid\", \"start_ticks\", \"boot_id\"}, as grants and attest print")
      ->required()
      ->type_name("JSON");
  cmd->add_option("SIG", args->signal, "TERM, SIGKILL, 9, ...")->required();
  cmd->add_flag("--check-parent", args->check_parent, "Also require the same parent");
  cmd->add_flag("--json", args->json, "Print {\"sent\", \"reason\"}");
  return Command{cmd, [args] { return Signal(*args); }};
}

}  // namespace cordon::cli

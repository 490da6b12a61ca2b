#include "cli/common.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "closure/program.h"
#include "closure/sha256.h"
#include "sys/fd.h"
#include "sys/json_text.h"

namespace cordon::cli {

void PrintError(std::string_view command, std::string_view message) {
  std::string line = (command.empty() ? "cordon" : "cordon " + std::string(command)) + ": " +
                     std::string(message) + "\n";
  (void)sys::WriteAll(STDERR_FILENO, line);
}

void PrintJson(const nlohmann::json& value) {
  (void)sys::WriteAll(STDOUT_FILENO, sys::JsonText(value) + "\n");
}

std::optional<store::Store> OpenStore(std::string_view command,
                                      const std::optional<std::string>& state_dir) {
  auto dir = store::ResolveStateDir(state_dir);
  if (!dir) {
    PrintError(command, dir.error().message());
    return std::nullopt;
  }
  auto store = store::Store::Open(*dir);
  if (!store) {
    PrintError(command, "cannot open the store in " + *dir + ": " + store.error().message() +
                            " (choose another with --state-dir)");
    return std::nullopt;
  }
  return std::move(*store);
}

std::optional<std::optional<store::Store>> OpenRecords(
    std::string_view command, const std::optional<std::string>& state_dir) {
  auto dir = store::ResolveStateDir(state_dir);
  if (!dir) {
    PrintError(command, dir.error().message());
    return std::nullopt;
  }
  std::error_code ec;
  if (!std::filesystem::exists(*dir, ec) && !ec) return std::optional<store::Store>();
  auto store = OpenStore(command, *dir);
  if (!store) return std::nullopt;
  return store;
}

std::expected<closure::Verification, std::string> VerifyClosureOption(const std::string& dir,
                                                                      bool pin_given,
                                                                      const std::string& pin) {
  if (!pin_given) return std::unexpected("--closure needs --pin HEX, the pin of its manifest");
  if (!closure::IsSha256Hex(pin)) return std::unexpected("--pin: expected 64 lowercase hex digits");
  auto v = closure::VerifyPinnedDir(dir, pin);
  if (!v) return std::unexpected("--closure: " + v.error().message());
  if (!v->ok()) {
    const closure::Failure& f = v->failures.front();
    std::string more =
        v->failures.size() > 1 ? " (and " + std::to_string(v->failures.size() - 1) + " more)" : "";
    return std::unexpected("--closure: " + dir + " does not verify: " +
                           std::string(closure::RuleName(f.rule)) + ": " + f.message + more);
  }
  return std::move(*v);
}

std::optional<std::string> Given(const std::string& value, bool given) {
  if (!given) return std::nullopt;
  return value;
}

}  // namespace cordon::cli

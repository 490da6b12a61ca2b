#include "cli/common.h"

#include <unistd.h>

#include <iostream>

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

std::optional<std::string> Given(const std::string& value, bool given) {
  if (!given) return std::nullopt;
  return value;
}

}  // namespace cordon::cli

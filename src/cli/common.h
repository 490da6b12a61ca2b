// What every subcommand shares: opening the store, printing JSON, and the
// exit status for cordon's own failures.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "closure/verify.h"
#include "store/store.h"

namespace cordon::cli {

// cordon refused or failed (DESIGN.md §5).
inline constexpr int kExitCordonFailed = 125;

// Prints "cordon <command>: <message>" on stderr.
void PrintError(std::string_view command, std::string_view message);

// One JSON value and a newline on stdout.
void PrintJson(const nlohmann::json& value);

// Opens the store in the state directory (--state-dir, $CORDON_STATE_DIR, or
// the default); prints the error and returns empty on failure.
std::optional<store::Store> OpenStore(std::string_view command,
                                      const std::optional<std::string>& state_dir);

// As OpenStore, for a command that only reads or finishes what is recorded
// (grants, reap): where the state directory does not exist, nothing was
// ever recorded, and none is made: the outer optional is empty on an error
// (printed), the inner one when there is no directory.
std::optional<std::optional<store::Store>> OpenRecords(std::string_view command,
                                                       const std::optional<std::string>& state_dir);

// --closure DIR --pin HEX, as `run` and `attest` take them: the verified
// closure, or a message naming the option and the first failing rule.
std::expected<closure::Verification, std::string> VerifyClosureOption(const std::string& dir,
                                                                      bool pin_given,
                                                                      const std::string& pin);

// "--state-dir" as an optional value from a CLI11 string that may be unset.
std::optional<std::string> Given(const std::string& value, bool given);

}  // namespace cordon::cli

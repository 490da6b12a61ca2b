// A policy file (`--policy FILE`, TOML): the same schema as the options of
// `cordon run`, with the limits under their JSON names:
//
//   isolation = "standard"            # none | standard | strict
//   network = "none"                  # none | host
//   ro_binds = [{src = "/opt/data", dst = "/data"}]   # dst defaults to src
//   binds = [{src = "/srv/out"}]
//   tmp_size_bytes = 268435456
//   uid_range = {first = 1000000000, count = 65536}
//   system_dirs = ["/usr", "/etc"]    # replace the default lists
//   hidden_paths = ["/etc/shadow"]
//   seccomp = {deny = ["chmod"]}      # refused on top of cordon's table
//   timeout_ms = 5000                 # and grace_ms, output_limit_bytes, memory_bytes,
//                                     # pids, cpu_seconds, file_size_bytes, open_files,
//                                     # address_space_bytes
//
// An unknown key is an error naming it, as is a value of the wrong type.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "contain/spec.h"

namespace cordon::contain {

struct PolicyError {
  std::string key;  // "ro_binds[1].src", or "" for a syntax error
  std::string reason;
  std::string message() const { return key.empty() ? reason : key + ": " + reason; }
};

// Sets in `spec` what the policy text names; the rest stays as it was.
// Values are checked for type and shape here; Validate checks the rest.
std::optional<PolicyError> ApplyPolicy(std::string_view text, Spec& spec);

}  // namespace cordon::contain

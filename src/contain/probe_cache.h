// A cache of the probe's one costly observation, a user namespace made, for
// the one-shot CLI: each `cordon run` would otherwise pay a short-lived child
// in a new user namespace (0.1-1 ms here) for an answer that rarely changes.
//
// The cached answer is keyed by every fact it rests on that can be read
// cheaply: the boot (and so the kernel), the cordon binary, the caller's
// credentials and namespaces, its seccomp state, the sysctls that switch
// user and network namespaces off, and the LSM's label and policy revision.
// Any change of one is a miss, and the probe is made again. Only a positive
// answer is kept (a refusal is observed afresh each time), and it can fail
// only closed: if namespaces stop being available under an unchanged key
// (the user namespace count at its limit, an LSM rule reloaded where no
// revision is exposed), the launch's clone3 fails and nothing runs; the CLI
// then drops the cache (DropNamespaceProbe) so the next run probes again.
#pragma once

#include <optional>
#include <string>

#include "contain/namespaces.h"
#include "contain/probe.h"

namespace cordon::contain {

// The facts a namespace probe's answer rests on, one "name=value" line each.
std::string NamespaceProbeKey();

// The cached answer in `path` if it was stored under exactly `key`;
// nullopt when the file is missing, unreadable, malformed or for another key.
std::optional<NamespaceSupport> LoadNamespaceProbe(const std::string& path, const std::string& key);

// Stores an available answer under `key` (mode 0600, replaced atomically by
// rename). A cache: not synced, and a failure to write it is not an error
// of the run. Refuses (EINVAL) an answer that is not `available`.
sys::Result<void> SaveNamespaceProbe(const std::string& path, const std::string& key,
                                     const NamespaceSupport& support);

// Removes the cache file; a missing one is not an error.
void DropNamespaceProbe(const std::string& path);

// ProbeHost, with the namespace observation taken from `cache_file` when it
// holds one for this key, else made and (when available) stored there.
// Everything else is observed as ProbeHost does.
sys::Result<Probe> ProbeHostCached(const ProbeOptions& options, const std::string& cache_file);

}  // namespace cordon::contain

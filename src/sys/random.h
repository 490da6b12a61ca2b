// Random identifiers from getrandom(2): tokens, nonces, ids.
#pragma once

#include <cstddef>
#include <string>

namespace cordon::sys {

// `bytes` random bytes as 2*bytes lowercase hex digits. Blocks only until
// the kernel's pool is initialised (early boot).
std::string RandomHex(size_t bytes);

// A random (version 4) UUID, "xxxxxxxx-xxxx-4xxx-Yxxx-xxxxxxxxxxxx".
std::string RandomUuid();

}  // namespace cordon::sys

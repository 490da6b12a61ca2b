// The SHA-256 of an open regular file, read in chunks, with proof that the
// file did not change while it was read.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <expected>
#include <functional>
#include <string>

#include "closure/rule.h"

namespace cordon::closure {

struct FileDigest {
  std::string sha256;  // 64 lowercase hex digits
  uint64_t size = 0;   // bytes read
};

// Reads `fd` from offset 0 to EOF with pread (the fd's offset is left alone)
// and hashes it. `opened` is the fstat taken when the fd was opened; after
// the read the fd is stat'ed again, and a difference in device, inode, size,
// mtime or ctime, or a byte count other than the size, fails with
// changed_while_reading: the bytes hashed may then be no version of the file
// that ever existed whole. `rel` names the file in messages. `before_read` is
// a test seam, called once before the first read.
std::expected<FileDigest, Failure> DigestFile(int fd, const struct stat& opened,
                                              const std::string& rel,
                                              const std::function<void()>& before_read = {});

}  // namespace cordon::closure

// SHA-256 through OpenSSL's EVP interface, fed in pieces so a large file is
// hashed in chunks and never held in memory whole.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "sys/error.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX; <openssl/evp.h> stays out of this header.

namespace cordon::closure {

class Sha256 final {
 public:
  static sys::Result<Sha256> Create();

  Sha256(Sha256&&) noexcept = default;
  Sha256& operator=(Sha256&&) noexcept = default;

  sys::Result<void> Update(std::string_view bytes);
  // The digest as 64 lowercase hex digits. The object cannot be updated after.
  sys::Result<std::string> FinishHex();

 private:
  struct Free {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  explicit Sha256(std::unique_ptr<evp_md_ctx_st, Free> ctx) : ctx_(std::move(ctx)) {}

  std::unique_ptr<evp_md_ctx_st, Free> ctx_;
};

// The digest of `bytes` as 64 lowercase hex digits.
sys::Result<std::string> Sha256Hex(std::string_view bytes);

// True for exactly 64 lowercase hex digits: the only spelling of a digest or
// a pin cordon accepts, so that one digest has one text.
bool IsSha256Hex(std::string_view text);

}  // namespace cordon::closure

#include "closure/sha256.h"

#include <openssl/err.h>
#include <openssl/evp.h>

namespace cordon::closure {
namespace {

// An OpenSSL failure carries no errno; its error queue says what went wrong.
std::unexpected<sys::Error> FailSsl(std::string what) {
  unsigned long code = ERR_get_error();
  if (code != 0) {
    char text[256];
    ERR_error_string_n(code, text, sizeof text);
    what += ": ";
    what += text;
  }
  ERR_clear_error();
  return sys::Fail(std::move(what));
}

}  // namespace

void Sha256::Free::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

sys::Result<Sha256> Sha256::Create() {
  std::unique_ptr<evp_md_ctx_st, Free> ctx(EVP_MD_CTX_new());
  if (!ctx) return FailSsl("EVP_MD_CTX_new");
  if (EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return FailSsl("EVP_DigestInit_ex(sha256)");
  }
  return Sha256(std::move(ctx));
}

sys::Result<void> Sha256::Update(std::string_view bytes) {
  if (!ctx_) return sys::Fail("EVP_DigestUpdate(sha256): already finished");
  if (EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()) != 1) {
    return FailSsl("EVP_DigestUpdate(sha256)");
  }
  return {};
}

sys::Result<std::string> Sha256::FinishHex() {
  if (!ctx_) return sys::Fail("EVP_DigestFinal_ex(sha256): already finished");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  int ok = EVP_DigestFinal_ex(ctx_.get(), digest, &length);
  ctx_.reset();
  if (ok != 1 || length != 32) return FailSsl("EVP_DigestFinal_ex(sha256)");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0xf];
  }
  return hex;
}

sys::Result<std::string> Sha256Hex(std::string_view bytes) {
  CORDON_ASSIGN_OR_RETURN(Sha256 sha, Sha256::Create());
  CORDON_RETURN_IF_ERROR(sha.Update(bytes));
  return sha.FinishHex();
}

bool IsSha256Hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace cordon::closure

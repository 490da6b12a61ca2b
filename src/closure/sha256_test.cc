#include "closure/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace cordon::closure {
namespace {

// Digests from /usr/bin/python3 -c 'import hashlib; print(hashlib.sha256(b"...").hexdigest())'.
TEST(Sha256Test, KnownDigests) {
  EXPECT_EQ(Sha256Hex("").value(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc").value(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, PiecesHashLikeTheWhole) {
  auto sha = Sha256::Create();
  ASSERT_TRUE(sha) << sha.error().message();
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(sha->Update(chunk));
  EXPECT_EQ(sha->FinishHex().value(),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, CannotBeUsedAfterFinishing) {
  auto sha = Sha256::Create();
  ASSERT_TRUE(sha);
  ASSERT_TRUE(sha->FinishHex());
  EXPECT_FALSE(sha->Update("x"));
  EXPECT_FALSE(sha->FinishHex());
}

TEST(Sha256Test, OnlyLowercaseHexOfTheRightLengthIsADigest) {
  const std::string good(64, 'a');
  EXPECT_TRUE(IsSha256Hex(good));
  EXPECT_TRUE(IsSha256Hex("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
  EXPECT_FALSE(IsSha256Hex(std::string(63, 'a')));
  EXPECT_FALSE(IsSha256Hex(std::string(65, 'a')));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'g')));
  EXPECT_FALSE(IsSha256Hex(""));
}

}  // namespace
}  // namespace cordon::closure

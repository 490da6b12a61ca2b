#include "contain/probe_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "support.h"
#include "sys/fd.h"

namespace cordon::contain {
namespace {

// The key with one fact's value replaced: what another boot, binary or
// setting would read.
std::string WithFact(const std::string& key, const std::string& name, const std::string& value) {
  size_t at = key.find("\n" + name + "=");
  EXPECT_NE(at, std::string::npos) << name;
  size_t end = key.find('\n', at + 1);
  return key.substr(0, at + 1) + name + "=" + value + key.substr(end);
}

void Put(const std::string& file, const std::string& content) {
  auto fd = sys::Open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_TRUE(fd.has_value()) << fd.error().message();
  ASSERT_TRUE(sys::WriteAll(fd->get(), content).has_value());
}

NamespaceSupport Available(bool network) {
  NamespaceSupport s;
  s.available = true;
  s.network = network;
  return s;
}

TEST(ProbeCacheTest, KeyNamesWhatTheAnswerRestsOn) {
  std::string key = NamespaceProbeKey();
  auto boot = sys::ReadFile("/proc/sys/kernel/random/boot_id");
  ASSERT_TRUE(boot.has_value());
  EXPECT_NE(key.find("\nboot_id=" + boot->substr(0, boot->find('\n')) + "\n"), std::string::npos)
      << key;
  for (const char* name :
       {"exe", "root", "ids", "ns_user", "ns_mnt", "status", "/proc/sys/user/max_user_namespaces",
        "/proc/sys/user/max_net_namespaces", "lsm", "apparmor_revision"}) {
    EXPECT_NE(key.find("\n" + std::string(name) + "="), std::string::npos) << name << "\n" << key;
  }
  // The same process, the same facts: the key is stable.
  EXPECT_EQ(key, NamespaceProbeKey());
}

TEST(ProbeCacheTest, HitOnlyUnderTheSameKey) {
  testing::TempDir dir;
  const std::string file = dir / "probe-cache";
  const std::string key = NamespaceProbeKey();
  EXPECT_FALSE(LoadNamespaceProbe(file, key).has_value()) << "no file yet";
  ASSERT_TRUE(SaveNamespaceProbe(file, key, Available(false)).has_value());
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto hit = LoadNamespaceProbe(file, key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_TRUE(hit->available);
  EXPECT_FALSE(hit->network);

  // Every fact invalidates it: another boot (another kernel is one), another binary,
  // another user namespace, a sysctl switched, a seccomp filter, an LSM
  // policy reloaded.
  for (auto [name, value] : {std::pair{"boot_id", "00000000-0000-0000-0000-000000000000"},
                             {"exe", "1:2:3:4.5"},
                             {"ids", "1000:1000:1000:1000"},
                             {"ns_user", "4:4026531999"},
                             {"/proc/sys/user/max_user_namespaces", "0"},
                             {"/proc/sys/user/max_net_namespaces", "0"},
                             {"status", "Seccomp:\t2;"},
                             {"apparmor_revision", "7"}}) {
    EXPECT_FALSE(LoadNamespaceProbe(file, WithFact(key, name, value)).has_value()) << name;
  }
  // A key that is a prefix of the stored one, or extends it, is another key.
  EXPECT_FALSE(LoadNamespaceProbe(file, key + "extra=1\n").has_value());
  EXPECT_FALSE(LoadNamespaceProbe(file, key.substr(0, key.size() - 1)).has_value());

  // Replaced atomically, network too.
  ASSERT_TRUE(SaveNamespaceProbe(file, key, Available(true)).has_value());
  hit = LoadNamespaceProbe(file, key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_TRUE(hit->network);

  DropNamespaceProbe(file);
  EXPECT_FALSE(LoadNamespaceProbe(file, key).has_value());
  DropNamespaceProbe(file);  // gone already: fine
}

TEST(ProbeCacheTest, RefusalsAreNotCachedAndGarbageIsAMiss) {
  testing::TempDir dir;
  const std::string file = dir / "probe-cache";
  const std::string key = NamespaceProbeKey();
  NamespaceSupport refused;
  refused.problem = "user namespaces are switched off";
  EXPECT_FALSE(SaveNamespaceProbe(file, key, refused).has_value());
  EXPECT_FALSE(LoadNamespaceProbe(file, key).has_value());

  for (std::string bad : {key, key + "--\n", key + "--\nnetwork=2\n", key + "--\nnetwork=1\nmore\n",
                          std::string("garbage")}) {
    Put(file, bad);
    EXPECT_FALSE(LoadNamespaceProbe(file, key).has_value()) << bad;
  }
}

TEST(ProbeCacheTest, CachedProbeUsesTheFileOnlyForItsKey) {
  testing::TempDir dir;
  const std::string file = dir / "probe-cache";
  auto live = ProbeHost({});
  ASSERT_TRUE(live.has_value());
  if (!live->isolation.namespaces.available) {
    GTEST_SKIP() << "no user namespace here: " << live->isolation.namespaces.problem;
  }
  // A miss observes and stores.
  auto first = ProbeHostCached({}, file);
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(first->isolation.namespaces.available);
  EXPECT_EQ(first->isolation.namespaces.network, live->isolation.namespaces.network);
  auto stored = LoadNamespaceProbe(file, NamespaceProbeKey());
  ASSERT_TRUE(stored.has_value());

  // A hit is used: a planted answer (network the other way) shows through.
  const bool network = live->isolation.namespaces.network;
  ASSERT_TRUE(SaveNamespaceProbe(file, NamespaceProbeKey(), Available(!network)).has_value());
  auto planted = ProbeHostCached({}, file);
  ASSERT_TRUE(planted.has_value());
  EXPECT_EQ(planted->isolation.namespaces.network, !network);

  // Under another key (another boot) it is not: observed again, and replaced.
  std::string other = WithFact(NamespaceProbeKey(), "boot_id", "another-boot");
  ASSERT_TRUE(SaveNamespaceProbe(file, other, Available(!network)).has_value());
  auto again = ProbeHostCached({}, file);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->isolation.namespaces.network, network);
  EXPECT_TRUE(LoadNamespaceProbe(file, NamespaceProbeKey()).has_value());

  // Without isolation nothing is looked at or stored.
  DropNamespaceProbe(file);
  ProbeOptions none;
  none.isolation = false;
  ASSERT_TRUE(ProbeHostCached(none, file).has_value());
  EXPECT_FALSE(LoadNamespaceProbe(file, NamespaceProbeKey()).has_value());
}

}  // namespace
}  // namespace cordon::contain

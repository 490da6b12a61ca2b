#include "closure/verify.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "closure/beneath.h"
#include "closure/digest.h"

namespace cordon::closure {
namespace {

std::string Octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Every directory that holds a listed file: "a/b/c" gives "a" and "a/b".
std::set<std::string, std::less<>> ListedDirectories(const Manifest& manifest) {
  std::set<std::string, std::less<>> dirs;
  for (const Entry& entry : manifest.entries) {
    for (size_t slash = entry.path.find('/'); slash != std::string::npos;
         slash = entry.path.find('/', slash + 1)) {
      dirs.insert(entry.path.substr(0, slash));
    }
  }
  return dirs;
}

}  // namespace

int Verification::FdFor(std::string_view path) const {
  for (const VerifiedFile& file : files) {
    if (file.path == path) return file.fd.get();
  }
  return -1;
}

std::expected<sys::UniqueFd, std::vector<Failure>> VerifyEntry(int dir_fd, const Entry& entry) {
  const std::string& rel = entry.path;
  auto opened = OpenRegularBeneath(dir_fd, rel);
  if (!opened) return std::unexpected(std::vector<Failure>{std::move(opened).error()});
  const struct stat& st = opened->st;

  std::vector<Failure> failures;
  if ((st.st_mode & 0222) != 0) {
    failures.push_back(Failure{Rule::kWritable, rel,
                               rel + " is writable (mode " + Octal(st.st_mode) +
                                   "): a closure file must have no w bit (chmod a-w)"});
  }
  const bool executable = (st.st_mode & S_IXUSR) != 0;
  if (executable != entry.executable) {
    failures.push_back(Failure{Rule::kExecutableMismatch, rel,
                               rel + (executable ? " is" : " is not") + " executable (mode " +
                                   Octal(st.st_mode) + "); the manifest says it " +
                                   (entry.executable ? "is" : "is not")});
  }
  if (static_cast<uint64_t>(st.st_size) != entry.size) {
    // The digest cannot match either; reading the file would only cost time.
    failures.push_back(Failure{Rule::kSizeMismatch, rel,
                               rel + " has " + std::to_string(st.st_size) +
                                   " bytes; the manifest says " + std::to_string(entry.size)});
    return std::unexpected(std::move(failures));
  }
  auto digest = DigestFile(opened->fd.get(), st, rel);
  if (!digest) {
    failures.push_back(std::move(digest).error());
  } else if (digest->sha256 != entry.sha256) {
    failures.push_back(
        Failure{Rule::kDigestMismatch, rel,
                rel + " has SHA-256 " + digest->sha256 + "; the manifest says " + entry.sha256});
  }
  if (!failures.empty()) return std::unexpected(std::move(failures));
  return std::move(opened->fd);
}

sys::Result<Verification> VerifyClosure(const std::string& dir, const Manifest& manifest,
                                        std::string_view pin, const VerifyOptions& options) {
  Verification result;
  if (auto mismatch = CheckPin(manifest, pin)) {
    result.failures.push_back(std::move(*mismatch));
    return result;
  }
  // The root may be reached through a symlink: the caller chose that path.
  // Nothing beneath it is.
  auto root = sys::Open(dir, O_RDONLY | O_DIRECTORY);
  if (!root) return std::unexpected(std::move(root).error());

  for (const Entry& entry : manifest.entries) {
    auto verified = VerifyEntry(root->get(), entry);
    if (!verified) {
      for (Failure& f : verified.error()) result.failures.push_back(std::move(f));
      continue;
    }
    result.files.push_back(VerifiedFile{entry.path, std::move(*verified)});
  }

  std::set<std::string, std::less<>> listed;
  for (const Entry& entry : manifest.entries) listed.insert(entry.path);
  const auto listed_dirs = ListedDirectories(manifest);
  std::vector<Failure> problems;
  Walk(
      root->get(),
      [&](const WalkItem& item) {
        // A listed name is judged by VerifyEntry, whatever it is.
        if (listed.contains(item.path)) return false;
        // The closure's own manifest (authenticated by the pin) is not part of it.
        if (item.path == kManifestDir && S_ISDIR(item.st.st_mode)) return true;
        if (item.path == kManifestPath) return false;
        if (S_ISDIR(item.st.st_mode)) {
          if (listed_dirs.contains(item.path)) return true;
          result.unlisted.push_back(item.path + "/");
          return false;
        }
        result.unlisted.push_back(item.path);
        return false;
      },
      problems);
  // Walk's problems are parts of the directory that could not be seen: they
  // may hide unlisted files, so they fail verification too.
  for (Failure& f : problems) result.failures.push_back(std::move(f));
  std::sort(result.unlisted.begin(), result.unlisted.end());
  if (!options.allow_unlisted) {
    for (const std::string& path : result.unlisted) {
      result.failures.push_back(Failure{Rule::kUnlisted, path,
                                        path + " is in the closure directory but not in the "
                                               "manifest"});
    }
  }
  if (!result.ok()) result.files.clear();
  return result;
}

nlohmann::json ToJson(const Verification& verification) {
  nlohmann::json failures = nlohmann::json::array();
  for (const Failure& f : verification.failures) failures.push_back(ToJson(f));
  return {{"ok", verification.ok()},
          {"failures", std::move(failures)},
          {"unlisted", verification.unlisted}};
}

}  // namespace cordon::closure

#include "closure/make.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include "closure/beneath.h"
#include "closure/digest.h"
#include "sys/fd.h"

namespace cordon::closure {
namespace {

// True when some path in sorted `files` lies beneath directory `dir`.
bool HasFileBeneath(const std::vector<std::string>& files, const std::string& dir) {
  const std::string prefix = dir + "/";
  auto it = std::lower_bound(files.begin(), files.end(), prefix);
  return it != files.end() && it->starts_with(prefix);
}

}  // namespace

sys::Result<MadeManifest> MakeManifest(const std::string& dir) {
  CORDON_ASSIGN_OR_RETURN(sys::UniqueFd root, sys::Open(dir, O_RDONLY | O_DIRECTORY));
  MadeManifest made;
  std::vector<std::string> dirs;
  Walk(
      root.get(),
      [&](const WalkItem& item) {
        // The closure's own manifest is not part of it.
        if (item.path == kManifestDir && S_ISDIR(item.st.st_mode)) return true;
        if (item.path == kManifestPath) return false;
        if (auto problem = PathProblem(item.path)) {
          made.problems.push_back(std::move(*problem));
          return false;
        }
        if (S_ISDIR(item.st.st_mode)) {
          dirs.push_back(item.path);
          return true;
        }
        auto opened = OpenRegularAt(item.parent_fd, item.name, item.path);
        if (!opened) {
          made.problems.push_back(std::move(opened).error());
          return false;
        }
        auto digest = DigestFile(opened->fd.get(), opened->st, item.path);
        if (!digest) {
          made.problems.push_back(std::move(digest).error());
          return false;
        }
        if ((opened->st.st_mode & 0222) != 0) made.writable.push_back(item.path);
        made.manifest.entries.push_back(Entry{item.path, std::move(digest->sha256), digest->size,
                                              (opened->st.st_mode & S_IXUSR) != 0});
        return false;
      },
      made.problems);

  auto& entries = made.manifest.entries;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.path < b.path; });
  std::vector<std::string> files;
  for (const Entry& e : entries) files.push_back(e.path);

  // A manifest lists files only, so a directory with none beneath it would be
  // lost, and verification would then report it as unlisted. Name the
  // topmost such directory only.
  for (const std::string& d : dirs) {
    if (HasFileBeneath(files, d)) continue;
    // One that could not be listed is already a problem (unreadable).
    if (std::any_of(made.problems.begin(), made.problems.end(),
                    [&](const Failure& f) { return f.path == d; })) {
      continue;
    }
    const size_t slash = d.rfind('/');
    if (slash != std::string::npos && !HasFileBeneath(files, d.substr(0, slash))) continue;
    made.problems.push_back(Failure{Rule::kEmptyDirectory, d + "/",
                                    d + "/ holds no file, and a manifest lists only files"});
  }
  if (entries.empty() && made.problems.empty()) {
    made.problems.push_back(
        Failure{Rule::kEmptyEntries, "", dir + " holds no file: a closure lists at least one"});
  }
  std::stable_sort(made.problems.begin(), made.problems.end(),
                   [](const Failure& a, const Failure& b) { return a.path < b.path; });
  return made;
}

}  // namespace cordon::closure

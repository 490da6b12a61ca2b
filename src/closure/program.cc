#include "closure/program.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sys/fd.h"

namespace cordon::closure {

sys::Result<Verification> VerifyPinnedDir(const std::string& dir, std::string_view pin) {
  std::string path = dir + "/" + std::string(kManifestPath);
  auto text = ReadManifestText(path);
  if (!text) {
    Verification v;
    v.failures.push_back(Failure{Rule::kMissing, std::string(kManifestPath),
                                 "cannot read the closure's manifest " + path + ": " +
                                     text.error().message() +
                                     " (write it with: cordon closure make DIR > " + path + ")"});
    return v;
  }
  auto manifest = ParsePinnedManifest(*text, pin);
  if (!manifest) {
    Verification v;
    v.failures.push_back(std::move(manifest).error());
    return v;
  }
  return VerifyClosure(dir, *manifest, pin);
}

std::expected<ClosureProgram, Failure> ResolveProgram(const Verification& verified,
                                                      const std::string& dir,
                                                      const std::string& program) {
  auto refuse = [&](const std::string& why) {
    return std::unexpected(Failure{Rule::kNotInClosure, program, program + " " + why});
  };
  if (!verified.ok()) return refuse("cannot run: the closure did not verify");
  std::string path = program.starts_with("/") ? program : dir + "/" + program;
  // Opening resolves every symlink once; from here on only the inode counts.
  auto opened = sys::Open(path, O_PATH);
  if (!opened) return refuse("cannot be opened: " + opened.error().message());
  struct stat st {};
  if (::fstat(opened->get(), &st) != 0) return refuse("cannot be examined");
  for (const VerifiedFile& file : verified.files) {
    struct stat pinned {};
    if (::fstat(file.fd.get(), &pinned) != 0) continue;
    if (pinned.st_dev != st.st_dev || pinned.st_ino != st.st_ino) continue;
    char magic[2] = {};
    bool script = ::pread(file.fd.get(), magic, 2, 0) == 2 && magic[0] == '#' && magic[1] == '!';
    return ClosureProgram{file.path, file.fd.get(), script};
  }
  return refuse("is not one of the closure's verified files");
}

}  // namespace cordon::closure

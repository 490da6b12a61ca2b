// cordon_seccomp_gen OUT: compiles, with the libseccomp it links (the one
// cordon links), the syscall filters a sandbox is given unless a policy
// names more calls (contain/seccomp.h: each level, with and without a
// network namespace), and writes them to OUT as C++ that cordon is built
// with (kPrecompiledSeccomp), so that a run takes its filter ready-made.
#include <seccomp.h>

#include <cstdio>
#include <string>

#include "contain/seccomp.h"

namespace cordon::contain {
// This program is what makes them: it has none.
const PrecompiledSeccompSet kPrecompiledSeccomp{0, 0, 0, nullptr, 0};
}  // namespace cordon::contain

int main(int argc, char** argv) {
  using cordon::contain::SeccompOptions;
  if (argc != 2) {
    std::fprintf(stderr, "usage: cordon_seccomp_gen OUT\n");
    return 2;
  }
  const struct scmp_version* v = seccomp_version();
  std::string out =
      "// Made by cordon_seccomp_gen (src/tools/seccomp_gen.cc) as cordon was built: the\n"
      "// filters libseccomp " +
      std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->micro) +
      " compiled. Not to be edited.\n"
      "#include \"contain/seccomp.h\"\n\n#include <iterator>\n\n"
      "namespace cordon::contain {\n"
      "namespace {\n\n";
  std::string entries;
  int n = 0;
  for (bool strict : {false, true}) {
    for (bool unix_sockets_only : {false, true}) {
      SeccompOptions options;
      options.strict = strict;
      options.unix_sockets_only = unix_sockets_only;
      auto code = cordon::contain::CompileSeccomp(options);
      if (!code) {
        std::fprintf(stderr, "cordon_seccomp_gen: %s\n", code.error().message().c_str());
        return 1;
      }
      const std::string name = "kProgram" + std::to_string(n++);
      out += "constexpr struct sock_filter " + name + "[] = {\n";
      for (const struct sock_filter& f : *code) {
        char line[96];
        std::snprintf(line, sizeof line, "    {0x%04x, %u, %u, 0x%08x},\n", f.code, f.jt, f.jf,
                      f.k);
        out += line;
      }
      out += "};\n\n";
      entries += std::string("    {") + (strict ? "true" : "false") + ", " +
                 (unix_sockets_only ? "true" : "false") + ", " + name + ", std::size(" + name +
                 ")},\n";
    }
  }
  out += "constexpr PrecompiledSeccomp kPrograms[] = {\n" + entries +
         "};\n\n"
         "}  // namespace\n\n"
         "const PrecompiledSeccompSet kPrecompiledSeccomp{" +
         std::to_string(v->major) + ", " + std::to_string(v->minor) + ", " +
         std::to_string(v->micro) +
         ", kPrograms, std::size(kPrograms)};\n\n"
         "}  // namespace cordon::contain\n";
  std::FILE* f = std::fopen(argv[1], "w");
  if (f == nullptr || std::fwrite(out.data(), 1, out.size(), f) != out.size() ||
      std::fclose(f) != 0) {
    std::perror(argv[1]);
    return 1;
  }
  return 0;
}

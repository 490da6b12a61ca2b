#include "contain/forked_memory.h"

#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sys/fd.h"

namespace cordon::contain {
namespace {

constexpr size_t kChunkBytes = 64 * 1024;

using Range = std::pair<uintptr_t, uintptr_t>;

uintptr_t PageSize() {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// How far from the thread pointer a thread's static TLS block may reach,
// either way (below it on x86-64, above it on arm64): every module's TLS,
// plus the C library's surplus and the thread's control block (a few KiB
// each), with room to spare. A page kept needlessly costs a copy; one
// left out costs the child.
uintptr_t TlsReach() {
  static const uintptr_t reach = [] {
    size_t tls = 0;
    ::dl_iterate_phdr(
        [](struct dl_phdr_info* info, size_t, void* data) {
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type == PT_TLS) *static_cast<size_t*>(data) += ph.p_memsz + ph.p_align;
          }
          return 0;
        },
        &tls);
    return (tls + 64 * 1024 + PageSize() - 1) & ~(PageSize() - 1);
  }();
  return reach;
}

// Whether every library call the child makes is bound already: a static
// program, or one bound at start (-z now, or LD_BIND_NOW). Bound lazily, a
// child's first call to a function would read the dynamic linker's tables,
// which live in anonymous memory as the heap does.
bool BoundAtStart() {
  static const bool bound = [] {
    if (const char* env = ::getenv("LD_BIND_NOW"); env != nullptr && *env != '\0') return true;
    bool now = true;  // the first object is the program itself
    ::dl_iterate_phdr(
        [](struct dl_phdr_info* info, size_t, void* data) {
          bool& now = *static_cast<bool*>(data);
          const ElfW(Dyn)* dynamic = nullptr;
          bool interpreted = false;
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type == PT_INTERP) interpreted = true;
            if (ph.p_type == PT_DYNAMIC) {
              dynamic = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + ph.p_vaddr);
            }
          }
          if (!interpreted || dynamic == nullptr) return 1;  // static: nothing is lazy
          now = false;
          for (const ElfW(Dyn)* d = dynamic; d->d_tag != DT_NULL; ++d) {
            if (d->d_tag == DT_BIND_NOW ||
                (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_BIND_NOW)) ||
                (d->d_tag == DT_FLAGS_1 && (d->d_un.d_val & DF_1_NOW))) {
              now = true;
            }
          }
          return 1;
        },
        &now);
    return now;
  }();
  return bound;
}

// Held while a HeapNotForked marks; a fork() elsewhere waits for it.
std::mutex& ForkLock() {
  static std::mutex lock;
  static std::once_flag registered;
  std::call_once(registered, [] {
    ::pthread_atfork([] { ForkLock().lock(); }, [] { ForkLock().unlock(); },
                     [] { ForkLock().unlock(); });
  });
  return lock;
}

struct Mapping {
  uintptr_t start = 0;
  uintptr_t end = 0;
  bool private_writable = false;  // rw-p
  bool file = false;              // an inode behind it
  bool unnamed_or_heap = false;   // no name, or [heap]
};

// "start-end perms offset dev inode [name]"; false for a line it cannot read.
bool ParseMapping(std::string_view line, Mapping* m) {
  auto field = [&line]() {
    size_t space = line.find(' ');
    std::string_view f = line.substr(0, space);
    line = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    return f;
  };
  std::string_view range = field(), perms = field();
  field();  // offset
  field();  // device
  std::string_view inode = field();
  size_t first = line.find_first_not_of(' ');
  std::string_view name = first == std::string_view::npos ? std::string_view() : line.substr(first);
  size_t dash = range.find('-');
  if (dash == std::string_view::npos || inode.empty()) return false;
  auto hex = [](std::string_view s, uintptr_t* out) {
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
    return ec == std::errc() && ptr == s.data() + s.size();
  };
  if (!hex(range.substr(0, dash), &m->start) || !hex(range.substr(dash + 1), &m->end)) {
    return false;
  }
  m->private_writable = perms == "rw-p";
  m->file = inode.find_first_not_of('0') != std::string_view::npos;
  m->unnamed_or_heap = name.empty() || name == "[heap]";
  return true;
}

}  // namespace

ChildMemory::~ChildMemory() {
  for (const auto& [start, end] : chunks_) ::munmap(reinterpret_cast<void*>(start), end - start);
}

void* ChildMemory::Allocate(size_t bytes, size_t align) {
  uintptr_t at = (next_ + align - 1) & ~(align - 1);
  if (chunks_.empty() || at + bytes > chunks_.back().second) {
    const size_t size = (std::max(bytes, kChunkBytes) + PageSize() - 1) & ~(PageSize() - 1);
    void* chunk = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (chunk == MAP_FAILED) {
      ok_ = false;
      return nullptr;
    }
    at = reinterpret_cast<uintptr_t>(chunk);
    chunks_.emplace_back(at, at + size);
  }
  next_ = at + bytes;
  return reinterpret_cast<void*>(at);
}

const char* ChildMemory::CopyString(const char* s) {
  return s == nullptr ? nullptr : Copy(s, std::strlen(s) + 1);
}

HeapNotForked::HeapNotForked(const ChildMemory& keep) : forks_held_(ForkLock()) {
  if (!kHeapLeftOutOfForks || !BoundAtStart()) return;
  const auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const auto tp = reinterpret_cast<uintptr_t>(__builtin_thread_pointer());
  std::vector<Range> kept = keep.ranges();
  kept.emplace_back(tp > TlsReach() ? (tp & ~(PageSize() - 1)) - TlsReach() : 0,
                    (tp & ~(PageSize() - 1)) + TlsReach());
  std::sort(kept.begin(), kept.end());

  // A list cut short (at the limit) leaves the rest in the fork: only whole
  // lines are read.
  const std::string maps = sys::ReadFile("/proc/self/maps", 4 << 20).value_or("");
  uintptr_t file_end = 0;  // where the last file-backed mapping ended
  for (size_t at = 0, eol; (eol = maps.find('\n', at)) != std::string::npos; at = eol + 1) {
    Mapping m;
    if (!ParseMapping(std::string_view(maps).substr(at, eol - at), &m)) break;
    const bool bss = !m.file && m.start == file_end;
    const bool stack = sp >= m.start && sp < m.end;
    file_end = m.file ? m.end : 0;
    if (!m.private_writable || m.file || !m.unnamed_or_heap || bss || stack) continue;
    // The mapping less the kept ranges, piece by piece.
    uintptr_t from = m.start;
    for (const auto& [keep_start, keep_end] : kept) {
      if (keep_end <= from || keep_start >= m.end) continue;
      if (keep_start > from) marked_.emplace_back(from, keep_start);
      from = std::max(from, keep_end);
    }
    if (from < m.end) marked_.emplace_back(from, m.end);
  }
  // Every range is given back (below), even one whose madvise failed: the
  // list was read while other threads map and unmap, and a range with a
  // hole in it by now fails (ENOMEM) having marked the mappings that are
  // there, among them perhaps one mapped since: another launch's
  // ChildMemory, whose child would then lack it.
  for (const auto& [start, end] : marked_) {
    ::madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTFORK);
  }
}

HeapNotForked::~HeapNotForked() {
  for (const auto& [start, end] : marked_) {
    ::madvise(reinterpret_cast<void*>(start), end - start, MADV_DOFORK);
  }
}

}  // namespace cordon::contain

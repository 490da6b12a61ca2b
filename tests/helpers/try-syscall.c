/* try-syscall: tries the system calls its arguments name, one each, and
 * prints "NAME ERRNO" for every one (0: the call succeeded; -1: an i386
 * call that faulted, see NO_ABI); the exit
 * status is the errno of the last. The pattern is bubblewrap's and
 * flatpak's tests/try-syscall.c, written anew for cordon's escape suite.
 *
 * Most calls get a bad descriptor or pointer, so that a call the filter
 * lets through fails with EBADF, EFAULT, EINVAL or ESRCH and harms
 * nothing, while a refused one fails with EPERM (or ENOSYS, EAFNOSUPPORT).
 * A few are real attempts, marked "real" below, where a bad argument
 * would tell nothing (unshare, userfaultfd, keyctl, the sockets, the
 * clock): the test judges those from outside as well.
 *
 * Static, so it runs in any filesystem view the helpers are bound into.
 * "socket-families" prints "open FAMILY TYPE PROTOCOL" for every socket
 * that could be made, over every family and type (and every netlink
 * protocol), and "socketpair FAMILY TYPE" for every socketpair.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/keyctl.h>
#include <linux/mount.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <linux/userfaultfd.h>
#include <netinet/in.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define WRONG_POINTER ((void*)1)
#define X32_BIT 0x40000000L

#ifndef AF_MAX
#define AF_MAX 46
#endif

/* The result of a raw call: 0, or the errno it failed with. */
static int Check(long rc) { return rc < 0 ? errno : 0; }

/* Closes what a successful socket call returned. */
static int Sock(long fd) {
  if (fd < 0) return errno;
  close((int)fd);
  return 0;
}

/* The value Int80 reports when int 0x80 is no system call gate at all: a
 * kernel without IA32 emulation (CONFIG_IA32_EMULATION off, or
 * ia32_emulation=false on 6.7 and later) answers it with a general
 * protection fault, SIGSEGV, before seccomp sees anything. Not an errno. */
#define NO_ABI (-1)

static sigjmp_buf int80_fault;
static void Int80Fault(int sig) {
  (void)sig;
  siglongjmp(int80_fault, 1);
}

/* An i386 system call through int 0x80 from this 64-bit process: seccomp
 * sees it as AUDIT_ARCH_I386, with i386 numbers. */
static int Int80(long nr, long a, long b, long c) {
#if defined(__x86_64__)
  struct sigaction fault = {.sa_handler = Int80Fault}, old;
  sigaction(SIGSEGV, &fault, &old);
  if (sigsetjmp(int80_fault, 1) != 0) {
    sigaction(SIGSEGV, &old, NULL);
    return NO_ABI;
  }
  long rc;
  __asm__ volatile("int $0x80"
                   : "=a"(rc)
                   : "a"(nr), "b"(a), "c"(b), "d"(c), "S"(0L), "D"(0L)
                   : "memory");
  sigaction(SIGSEGV, &old, NULL);
  return rc < 0 && rc > -4096 ? (int)-rc : 0;
#else
  (void)nr, (void)a, (void)b, (void)c;
  return ENOENT;
#endif
}

/* clone(CLONE_NEWUSER) as the raw call (glibc's clone needs a stack); the
 * child exits at once. */
static int CloneNewUser(void) {
  long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid < 0) return errno;
  waitpid((pid_t)pid, NULL, 0);
  return 0;
}

static void SocketFamilies(void) {
  static const int types[] = {SOCK_STREAM,    SOCK_DGRAM, SOCK_RAW,   SOCK_RDM,
                              SOCK_SEQPACKET, SOCK_DCCP,  SOCK_PACKET};
  for (int family = 0; family <= AF_MAX + 2; ++family) {
    for (size_t t = 0; t < sizeof types / sizeof types[0]; ++t) {
      /* Every netlink protocol; the default protocol elsewhere. */
      int last = family == AF_NETLINK ? 31 : 0;
      for (int protocol = 0; protocol <= last; ++protocol) {
        int fd = socket(family, types[t] | SOCK_CLOEXEC, protocol);
        if (fd >= 0) {
          printf("open %d %d %d\n", family, types[t], protocol);
          close(fd);
        }
      }
      int pair[2];
      if (socketpair(family, types[t] | SOCK_CLOEXEC, 0, pair) == 0) {
        printf("socketpair %d %d\n", family, types[t]);
        close(pair[0]);
        close(pair[1]);
      }
    }
  }
}

/* --- The host-facing classes (tests/integration/escape_host_test.cc). ---
 * These print "NAME ERRNO" lines of their own, one per attempt, besides
 * the summary line main prints for the call. */

/* What case 6 pushes: the test looks for it on the pty master it owns. */
#define STI_CANARY "cordon-sti-canary\n"

static void Report(const char* what, const char* where, int err) {
  printf("%s:%s %d\n", what, where, err);
  fflush(stdout);
}

/* TIOCSTI (each byte), TIOCSTI with high bits set (CVE-2019-10063) and
 * TIOCLINUX's paste (CVE-2023-28100) on `fd`; the errno of the first
 * byte's push is what is reported. */
static void InjectInto(int fd, const char* where) {
  static const char canary[] = STI_CANARY;
  int err = Check(ioctl(fd, TIOCSTI, &canary[0]));
  for (size_t i = 1; canary[i]; ++i) (void)ioctl(fd, TIOCSTI, &canary[i]);
  Report("sti", where, err);
  unsigned long high = (0x123UL << 32) | (unsigned long)TIOCSTI;
  err = Check(syscall(SYS_ioctl, fd, high, &canary[0]));
  for (size_t i = 1; canary[i]; ++i) (void)syscall(SYS_ioctl, fd, high, &canary[i]);
  Report("sti-high", where, err);
  char paste = 3; /* TIOCL_PASTESEL */
  Report("linux", where, Check(ioctl(fd, TIOCLINUX, &paste)));
}

/* Case 6: every terminal the sandbox can name: /dev/tty, /dev/console,
 * /dev/pts/N, and the terminals other processes hold (/proc/PID/fd/N);
 * then, from a new session, each taken as the controlling terminal
 * (TIOCSCTTY) and pushed into again; then a pty of its own. */
static int TtyInject(void) {
  char paths[64][300];
  int n = 0;
  strcpy(paths[n++], "/dev/tty");
  strcpy(paths[n++], "/dev/console");
  DIR* pts = opendir("/dev/pts");
  for (struct dirent* e; pts && (e = readdir(pts)) && n < 32;) {
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
      snprintf(paths[n++], 300, "/dev/pts/%.32s", e->d_name);
  }
  if (pts) closedir(pts);
  DIR* proc = opendir("/proc");
  for (struct dirent* e; proc && (e = readdir(proc)) && n < 64;) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || atoi(e->d_name) == getpid()) continue;
    for (int fd = 0; fd < 3 && n < 64; ++fd) {
      char link[300], target[300];
      snprintf(link, sizeof link, "/proc/%.32s/fd/%d", e->d_name, fd);
      ssize_t len = readlink(link, target, sizeof target - 1);
      if (len <= 0) continue;
      target[len] = 0;
      if (strncmp(target, "/dev/", 5) == 0 && strcmp(target, "/dev/null") != 0) {
        strcpy(paths[n++], link);
      }
    }
  }
  if (proc) closedir(proc);
  int opened = 0;
  for (int i = 0; i < n; ++i) {
    int fd = open(paths[i], O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    if (!isatty(fd)) {
      close(fd);
      continue;
    }
    ++opened;
    Report("tty", paths[i], 0);
    InjectInto(fd, paths[i]);
    pid_t child = fork();
    if (child == 0) {
      int err = setsid() < 0 ? errno : Check(ioctl(fd, TIOCSCTTY, 0));
      Report("ctty", paths[i], err);
      if (err == 0) InjectInto(fd, paths[i]);
      _exit(0);
    }
    if (child > 0) waitpid(child, NULL, 0);
    close(fd);
  }
  /* A pty of its own, as its controlling terminal: there the kernel
   * itself would let TIOCSTI through, so only the filter stands. */
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0) {
    const char* name = ptsname(master);
    pid_t child = fork();
    if (child == 0) {
      setsid();
      int slave = name ? open(name, O_RDWR | O_CLOEXEC) : -1;
      Report("own-ctty", "pty", slave < 0 ? errno : 0);
      if (slave >= 0) InjectInto(slave, "pty");
      _exit(0);
    }
    if (child > 0) waitpid(child, NULL, 0);
    close(master);
  }
  return opened;
}

/* The pids after "NAME:": a comma-separated list. */
static int Pids(const char* list, pid_t* pids, int max) {
  int n = 0;
  for (const char* p = list; p && *p && n < max;) {
    pids[n++] = (pid_t)atoi(p);
    p = strchr(p, ',');
    if (p) ++p;
  }
  return n;
}

/* Case 21: signals at everything, with every signal blocked here (the
 * init may forward some back; none must change this process's fate). The
 * pids named are host processes the test started (pids as the host sees
 * them: "guessed" from inside), with pids 1..64 besides. Each line gives
 * how many deliveries the kernel reported; the test judges the host. */
static int Signals(const char* list) {
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, NULL);
  pid_t pids[16];
  int n = Pids(list, pids, 16);
  int delivered = 0;
  for (int s = 1; s < 65; ++s) delivered += kill(-1, s) == 0;
  printf("kill-minus-one %d\n", delivered);
  delivered = 0;
  for (int s = 1; s < 65; ++s) delivered += kill(1, s) == 0;
  printf("kill-one %d\n", delivered);
  delivered = 0;
  for (int i = 0; i < n; ++i) {
    for (int s = 1; s < 65; ++s) delivered += kill(pids[i], s) == 0;
    delivered += kill(-pids[i], SIGKILL) == 0; /* its process group */
  }
  printf("kill-named %d\n", delivered);
  /* pidfds, of the named pids and of 1..64 (not this process); the
   * deliveries to the named ones are also counted apart: in a pid
   * namespace 1..64 name the sandbox's own processes (its init among
   * them, which takes the send and drops the signal, as kill(1) does). */
  delivered = 0;
  int opened = 0, delivered_named = 0;
  for (int i = 0; i < n + 64; ++i) {
    pid_t pid = i < n ? pids[i] : i - n + 1;
    if (pid == getpid()) continue;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0) {
      char path[32];
      snprintf(path, sizeof path, "/proc/%d", (int)pid);
      fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* a pidfd too */
    }
    if (fd < 0) continue;
    ++opened;
    int sent = syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) == 0;
    delivered += sent;
    if (i < n) delivered_named += sent;
    close(fd);
  }
  printf("pidfd-opened %d\npidfd-delivered %d\npidfd-delivered-named %d\n", opened, delivered,
         delivered_named);
  /* F_SETOWN (and a process group's F_SETOWN_EX) with F_SETSIG SIGKILL on
   * a pipe in O_ASYNC mode; a write makes the kernel send it. */
  delivered = 0;
  for (int i = 0; i < n; ++i) {
    for (int group = 0; group < 2; ++group) {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) continue;
      int err = 0;
      if (group) {
        struct f_owner_ex owner = {F_OWNER_PGRP, pids[i]};
        err = Check(fcntl(p[0], F_SETOWN_EX, &owner));
      } else {
        err = Check(fcntl(p[0], F_SETOWN, pids[i]));
      }
      if (err == 0) err = Check(fcntl(p[0], F_SETSIG, SIGKILL));
      if (err == 0) err = Check(fcntl(p[0], F_SETFL, O_ASYNC | O_NONBLOCK));
      if (err == 0) {
        ++delivered;
        (void)!write(p[1], "x", 1);
      }
      close(p[0]);
      close(p[1]);
    }
  }
  printf("setown-armed %d\n", delivered);
  /* TIOCSIG on a pty of its own, and TIOCSPGRP to the named groups: the
   * pty's foreground group can only be one of its own session. */
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  int spgrp = 0;
  if (master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0) {
    const char* name = ptsname(master);
    int ready[2];
    if (name && pipe2(ready, O_CLOEXEC) == 0) {
      pid_t child = fork();
      if (child == 0) {
        setsid();
        int slave = open(name, O_RDWR | O_CLOEXEC);
        for (int i = 0; i < n && slave >= 0; ++i) {
          pid_t group = pids[i];
          spgrp += ioctl(slave, TIOCSPGRP, &group) == 0;
        }
        (void)!write(ready[1], &spgrp, sizeof spgrp);
        pause();
        _exit(0);
      }
      close(ready[1]);
      if (read(ready[0], &spgrp, sizeof spgrp) != sizeof spgrp) spgrp = -1;
      close(ready[0]);
      int sig = SIGINT; /* TIOCSIG takes SIGINT, SIGQUIT and SIGTSTP only */
      printf("tiocspgrp %d\ntiocsig %d\n", spgrp, Check(ioctl(master, TIOCSIG, sig)));
      if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
      }
    }
    close(master);
  }
  return 0;
}

/* Case 19/20: a connection to an address the test listens on. */
static int ConnectTo(int family, const struct sockaddr* addr, socklen_t len) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  /* A bounded connect: a black-holed address must not hang the run. */
  struct timeval tv = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int err = Check(connect(fd, addr, len));
  close(fd);
  return err;
}

static int ConnectInet(const char* spec, int family) {
  char host[64];
  const char* colon = strrchr(spec, ':');
  if (!colon || colon - spec >= (long)sizeof host) return EINVAL;
  memcpy(host, spec, colon - spec);
  host[colon - spec] = 0;
  int port = atoi(colon + 1);
  if (family == AF_INET) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) return EINVAL;
    return ConnectTo(AF_INET, (struct sockaddr*)&a, sizeof a);
  }
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
  if (inet_pton(AF_INET6, host, &a.sin6_addr) != 1) return EINVAL;
  return ConnectTo(AF_INET6, (struct sockaddr*)&a, sizeof a);
}

static int ConnectUnix(const char* name, int abstract) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  size_t len = strlen(name);
  if (len + 2 > sizeof a.sun_path) return ENAMETOOLONG;
  memcpy(a.sun_path + (abstract ? 1 : 0), name, len);
  socklen_t size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (abstract ? 1 : 0));
  return ConnectTo(AF_UNIX, (struct sockaddr*)&a, size);
}

/* Case 27: exhaustion, each to its bound, holding what it got until the
 * process exits. Prints how many it got and the errno that stopped it. */
static int Exhaust(const char* what, const char* where) {
  long got = 0;
  int err = 0;
  if (strcmp(what, "fill") == 0) { /* bytes into a file under `where` */
    char path[300], block[65536];
    memset(block, 'x', sizeof block);
    snprintf(path, sizeof path, "%s/fill", where);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    for (;;) {
      ssize_t w = write(fd, block, sizeof block);
      if (w <= 0) {
        err = w < 0 ? errno : ENOSPC;
        break;
      }
      got += w;
      if (got > (8L << 30)) break; /* a bound of its own */
    }
    close(fd);
  } else if (strcmp(what, "inodes") == 0) { /* empty files under `where` */
    char path[300];
    /* At most 50000: past that the bound is missing, and the test says
     * so without taking more of the host's kernel memory. */
    for (; got < 50000; ++got) {
      snprintf(path, sizeof path, "%s/i%ld", where, got);
      int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) {
        err = errno;
        break;
      }
      close(fd);
    }
  } else if (strcmp(what, "pipes") == 0) { /* pipes, each filled, held */
    int last[2] = {-1, -1};
    for (;;) {
      int p[2];
      if (pipe2(p, O_NONBLOCK) != 0) {
        err = errno;
        break;
      }
      ++got;
      last[0] = p[0];
      last[1] = p[1];
      char block[4096] = {0};
      while (write(p[1], block, sizeof block) > 0) {
      }
    }
    /* The last one is given back: what follows needs a descriptor. */
    if (last[0] >= 0) {
      close(last[0]);
      close(last[1]);
    }
  } else if (strcmp(what, "inotify") == 0) { /* instances, then closed */
    int first = -1;
    for (int fd; (fd = inotify_init1(IN_CLOEXEC)) >= 0; ++got) {
      if (first < 0) first = fd;
    }
    err = errno;
    for (long i = 0; first >= 0 && i < got; ++i) close(first + (int)i);
  } else if (strcmp(what, "watches") == 0) { /* watches, one per file made */
    int fd = inotify_init1(IN_CLOEXEC);
    if (fd < 0) return errno;
    char path[300];
    for (; got < 1000000; ++got) {
      snprintf(path, sizeof path, "%s/w%ld", where, got);
      int f = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
      if (f < 0) {
        err = errno;
        break;
      }
      close(f);
      if (inotify_add_watch(fd, path, IN_MODIFY) < 0) {
        err = errno;
        break;
      }
    }
  } else {
    return ENOENT;
  }
  printf("%s-got %ld\n%s-errno %d\n", what, got, what, err);
  fflush(stdout);
  return 0;
}

/* --- The /proc and descriptor classes (cases 1, 2, 3, 5, 11, 13). --- */

/* Prints "fd N TARGET" for every descriptor this process holds (but the
 * one that lists them). */
static int ListFds(void) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == NULL) return errno;
  for (struct dirent* e; (e = readdir(dir)) != NULL;) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(dir)) continue;
    char link[300], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    target[n < 0 ? 0 : n] = '\0';
    printf("fd %s %s\n", e->d_name, target);
  }
  closedir(dir);
  return 0;
}

/* getcwd, printed as "cwd PATH": never "(unreachable)..." for a working
 * directory the sandbox's root does not contain. */
static int Cwd(const char* label) {
  char buf[4096];
  if (getcwd(buf, sizeof buf) == NULL) return errno;
  printf("%s %s\n", label, buf);
  return 0;
}

/* Prints "LABEL NAME..." for the entries of the directory `fd` (kept open). */
static void ListDir(const char* label, int fd) {
  int copy = dup(fd);
  DIR* dir = copy < 0 ? NULL : fdopendir(copy);
  printf("%s", label);
  if (dir != NULL) {
    for (struct dirent* e; (e = readdir(dir)) != NULL;) printf(" %s", e->d_name);
    closedir(dir);
  }
  printf("\n");
}

/* Reads up to 4 KiB of `path` (relative to `at`) and prints it as
 * "data TEXT"; the errno of the open or the read. */
static int ReadAt(int at, const char* path) {
  int fd = openat(at, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int err = n < 0 ? errno : 0;
  close(fd);
  if (n > 0) {
    for (ssize_t i = 0; i < n; ++i) buf[i] = buf[i] == '\0' ? ' ' : buf[i]; /* environ */
    buf[n] = '\0';
    printf("data %s\n", buf);
  }
  return err;
}

/* Climbs ".." from the working directory (64 times: more than any path
 * is deep), moves there with fchdir, prints where that is and what it
 * holds, then reads `rel` from there (CVE-2024-21626's climb). */
static int Climb(const char* rel) {
  int at = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (at < 0) return errno;
  for (int i = 0; i < 64; ++i) {
    int up = openat(at, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (up < 0) break;
    close(at);
    at = up;
  }
  if (fchdir(at) == 0) Cwd("climb-cwd");
  ListDir("climb-ls", at);
  int err = ReadAt(at, rel);
  close(at);
  return err;
}

/* For every descriptor held: fchdir into it and openat(fd, ".."). 0 if
 * either worked for any of them (printed "fd-climb-hit N"); else the
 * errno of the last attempt (ENOTDIR for pipes and files). */
static int FdClimb(void) {
  int err = EBADF, hit = 0;
  int home = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  for (int fd = 0; fd < 1024; ++fd) {
    if (fd == home || fcntl(fd, F_GETFD) < 0) continue;
    int up = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (up >= 0) {
      printf("fd-climb-hit %d parent\n", fd);
      ListDir("fd-climb-ls", up);
      close(up);
      hit = 1;
    } else {
      err = errno;
    }
    if (fchdir(fd) == 0) {
      printf("fd-climb-hit %d fchdir\n", fd);
      Cwd("fd-climb-cwd");
      hit = 1;
    } else {
      err = errno;
    }
  }
  if (home >= 0) {
    (void)!fchdir(home);
    close(home);
  }
  return hit ? 0 : err;
}

/* Opens the FIFO `path` for reading, which blocks until the test opens
 * it for writing, and reads it to EOF: the test looks at this process
 * from outside meanwhile. */
static int WaitFifo(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  char buf[64];
  while (read(fd, buf, sizeof buf) > 0) {
  }
  close(fd);
  return 0;
}

/* Appends `token` to the file behind the magic link `exe`, opened for
 * writing directly and, as runc's CVE-2019-5736 did, reopened through
 * /proc/self/fd/N of an O_PATH descriptor. Appending harms nothing (an
 * ELF file ignores what follows it) and changes the digest the test
 * watches. 0 if a write went through, else the errno of the last step. */
static int AppendThrough(int opath, const char* exe, const char* token) {
  int err = 0;
  for (int way = 0; way < 2; ++way) {
    int fd;
    if (way == 0) {
      fd = open(exe, O_WRONLY | O_APPEND | O_CLOEXEC);
    } else {
      char via[64];
      if (opath < 0) continue;
      snprintf(via, sizeof via, "/proc/self/fd/%d", opath);
      fd = open(via, O_WRONLY | O_APPEND | O_CLOEXEC);
    }
    if (fd < 0) {
      err = errno;
      continue;
    }
    ssize_t n = write(fd, token, strlen(token));
    err = n > 0 ? 0 : (n < 0 ? errno : EIO);
    close(fd);
    if (err == 0) return 0;
  }
  return err;
}

/* The targets of case 1: this program, the init (pid 1: a copy of the
 * supervisor in a pid namespace), and the parent (the supervisor without
 * one). */
static void ExeTargets(char targets[3][64]) {
  snprintf(targets[0], 64, "/proc/self/exe");
  snprintf(targets[1], 64, "/proc/1/exe");
  snprintf(targets[2], 64, "/proc/%d/exe", (int)getppid());
}

static int ExeWrite(const char* token) {
  char targets[3][64];
  ExeTargets(targets);
  int last = 0, any = 0;
  for (int t = 0; t < 3; ++t) {
    int opath = open(targets[t], O_PATH | O_CLOEXEC);
    int err = AppendThrough(opath, targets[t], token);
    printf("exe-write %s %d\n", targets[t], err);
    if (opath >= 0) close(opath);
    if (err == 0) any = 1;
    last = err;
  }
  return any ? 0 : last;
}

/* A double-forked, setsid'ed child holds O_PATH descriptors of the
 * targets and retries the reopen for `ms` milliseconds, while the command
 * (this process) exits at once and the init, and with it the supervisor's
 * hold on its binary, goes away. It prints nothing (its output would hold
 * the run's pipes); the test watches the digests and the child's life. */
static int ExeRace(const char* token, int ms) {
  pid_t pid = fork();
  if (pid < 0) return errno;
  if (pid > 0) {
    waitpid(pid, NULL, 0);
    return 0;
  }
  setsid();
  if (fork() != 0) _exit(0);
  int null = open("/dev/null", O_RDWR);
  dup2(null, 1);
  dup2(null, 2);
  char targets[3][64];
  ExeTargets(targets);
  int opath[3];
  for (int t = 0; t < 3; ++t) opath[t] = open(targets[t], O_PATH | O_CLOEXEC);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    for (int t = 0; t < 3; ++t) {
      if (AppendThrough(opath[t], targets[t], token) == 0) _exit(0);
    }
    usleep(1000);
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
  _exit(0);
}

/* Whether pid 1 has finished its own setup: no capabilities left and
 * no_new_privs set (RunInit's last steps). */
static int InitSettled(void) {
  int fd = open("/proc/1/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 1;
  buf[n] = '\0';
  return strstr(buf, "CapEff:\t0000000000000000") != NULL && strstr(buf, "NoNewPrivs:\t1") != NULL;
}

/* Case 3: from the first instruction, over and over until the init has
 * settled (and a while after), tries /proc/1/mem, /proc/1/environ, every
 * /proc/1/fd/N and process_vm_readv on pid 1. Prints "proc1-KIND ERRNO"
 * with 0 when that kind ever succeeded, and what it read as "data ..."
 * (also /proc/1/cmdline, readable to anyone, if it is not the init's own
 * "cordon-init" but the supervisor's);
 * returns 0 when anything succeeded. Without a pid namespace pid 1 is
 * the host's init, which is tried a fixed number of times. */
static int Proc1Window(void) {
  int errs[4] = {0, 0, 0, 0}, ok[4] = {0, 0, 0, 0};
  int ours = getppid() == 1;
  int after = 0;
  for (int i = 0; i < 5000 && after < 20; ++i) {
    if (!ours ? i >= 20 : InitSettled()) ++after;
    int fd = open("/proc/1/mem", O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
      ok[0] = 1;
      close(fd);
    } else {
      errs[0] = errno;
    }
    if (ours) { /* readable to anyone: it must be the init's own title by now */
      char title[sizeof "cordon-init"] = "";
      int cmd = open("/proc/1/cmdline", O_RDONLY | O_CLOEXEC);
      ssize_t got = cmd < 0 ? -1 : read(cmd, title, sizeof title - 1);
      if (cmd >= 0) close(cmd);
      if (got > 0 && strcmp(title, "cordon-init") != 0) ReadAt(AT_FDCWD, "/proc/1/cmdline");
    }
    if (ReadAt(AT_FDCWD, "/proc/1/environ") == 0) {
      ok[1] = 1;
    } else {
      errs[1] = errno;
    }
    DIR* dir = opendir("/proc/1/fd");
    if (dir != NULL) {
      for (struct dirent* e; (e = readdir(dir)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char link[300], target[4096];
        snprintf(link, sizeof link, "/proc/1/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n >= 0) {
          target[n] = '\0';
          printf("data fd %s %s\n", e->d_name, target);
          ok[2] = 1;
          int opened = open(link, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
          if (opened >= 0) close(opened);
        } else {
          errs[2] = errno;
        }
      }
      closedir(dir);
    } else {
      errs[2] = errno;
    }
    /* Any address will do: the kernel checks access to pid 1 first
     * (EPERM or ESRCH when refused), then the address (EFAULT if it is
     * not mapped there, which means access was granted). */
    char buf[16];
    struct iovec local = {buf, sizeof buf}, remote = {(void*)&errs, sizeof buf};
    if (syscall(SYS_process_vm_readv, 1, &local, 1, &remote, 1, 0) >= 0 || errno == EFAULT) {
      ok[3] = 1;
    } else {
      errs[3] = errno;
    }
  }
  const char* kinds[4] = {"mem", "environ", "fd", "vm_readv"};
  int any = 0;
  for (int k = 0; k < 4; ++k) {
    printf("proc1-%s %d\n", kinds[k], ok[k] ? 0 : errs[k]);
    any |= ok[k];
  }
  return any ? 0 : errs[0];
}

/* Writes `value` to `path` (cases 5 and 11): the errno of the open or
 * the write. */
static int WriteFile(const char* path, const char* value) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = write(fd, value, strlen(value));
  int err = n < 0 ? errno : 0;
  close(fd);
  return err;
}

/* CVE-2022-0492: a cgroup v1 hierarchy mounted afresh, and its
 * release_agent written. */
static int CgroupV1ReleaseAgent(void) {
  mkdir("/tmp/.probe-cgroup", 0700);
  if (mount("cgroup", "/tmp/.probe-cgroup", "cgroup", 0, "rdma") != 0 &&
      mount("cgroup", "/tmp/.probe-cgroup", "cgroup", 0, "memory") != 0) {
    return errno;
  }
  int err = WriteFile("/tmp/.probe-cgroup/release_agent", "/bin/true");
  umount("/tmp/.probe-cgroup");
  return err;
}

static int RaiseRlimit(int resource) {
  struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
  return Check(setrlimit(resource, &rl));
}

static int Try(const char* arg) {
  errno = 0;
  /* Calls both cordon and flatpak allow: EFAULT or EBADF if not blocked. */
  if (strcmp(arg, "chmod") == 0) return Check(chmod(WRONG_POINTER, 0700));
  if (strcmp(arg, "listen") == 0) return Check(listen(-1, 42));
  if (strcmp(arg, "prctl") == 0)
    return Check(prctl(PR_GET_CHILD_SUBREAPER, WRONG_POINTER, 0, 0, 0));
  if (strcmp(arg, "ioctl-TIOCNOTTY") == 0) return Check(ioctl(-1, TIOCNOTTY));
  /* Calls both block. */
  if (strcmp(arg, "chroot") == 0) return Check(chroot(WRONG_POINTER));
  if (strcmp(arg, "clone3") == 0) return Check(syscall(SYS_clone3, WRONG_POINTER, 88));
  if (strcmp(arg, "ioctl-TIOCSTI") == 0) return Check(ioctl(-1, TIOCSTI, WRONG_POINTER));
  if (strcmp(arg, "ioctl-TIOCSTI-high") == 0) {
    /* CVE-2019-10063: the kernel compares 32 bits of the request. */
    unsigned long request = (0x123UL << 32) | (unsigned long)TIOCSTI;
    return Check(syscall(SYS_ioctl, -1, request, WRONG_POINTER));
  }
  if (strcmp(arg, "ioctl-TIOCLINUX") == 0) return Check(ioctl(-1, TIOCLINUX, WRONG_POINTER));
  if (strcmp(arg, "ptrace") == 0) return Check(syscall(SYS_ptrace, 2 /* PEEKDATA */, 0, 0, 0));
  if (strcmp(arg, "mount") == 0) {
    return Check(mount(WRONG_POINTER, WRONG_POINTER, WRONG_POINTER, 0, NULL));
  }
  /* The nested user namespace surface (case 14). */
  if (strcmp(arg, "unshare") == 0) return Check(unshare(CLONE_NEWUSER)); /* real */
  if (strcmp(arg, "clone-newuser") == 0) return CloneNewUser();          /* real */
  if (strcmp(arg, "setns") == 0) return Check(setns(-1, 0));
  if (strcmp(arg, "fsopen") == 0) return Sock(syscall(SYS_fsopen, "tmpfs", 0)); /* real */
  if (strcmp(arg, "fsopen-overlay") == 0) return Sock(syscall(SYS_fsopen, "overlay", 0));
  if (strcmp(arg, "fsmount") == 0) return Check(syscall(SYS_fsmount, -1, 0, 0));
  if (strcmp(arg, "fsconfig") == 0) return Check(syscall(SYS_fsconfig, -1, 0, NULL, NULL, 0));
  if (strcmp(arg, "fspick") == 0) return Check(syscall(SYS_fspick, -1, WRONG_POINTER, 0));
  if (strcmp(arg, "open_tree") == 0) return Check(syscall(SYS_open_tree, -1, WRONG_POINTER, 0));
  if (strcmp(arg, "move_mount") == 0) {
    return Check(syscall(SYS_move_mount, -1, WRONG_POINTER, -1, WRONG_POINTER, 0));
  }
  if (strcmp(arg, "mount_setattr-usr") == 0) { /* real: make /usr writable */
    struct mount_attr attr = {.attr_clr = MOUNT_ATTR_RDONLY};
    return Check(syscall(SYS_mount_setattr, AT_FDCWD, "/usr", AT_RECURSIVE, &attr, sizeof attr));
  }
  if (strcmp(arg, "overlay") == 0) { /* real: an overlay over /usr */
    mkdir("/tmp/.probe-upper", 0700);
    mkdir("/tmp/.probe-work", 0700);
    return Check(mount("overlay", "/usr", "overlay", 0,
                       "lowerdir=/usr,upperdir=/tmp/.probe-upper,workdir=/tmp/.probe-work"));
  }
  if (strncmp(arg, "write:", 6) == 0) { /* real: create the file named */
    int fd = open(arg + 6, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    close(fd);
    return 0;
  }
  if (strcmp(arg, "netlink-netfilter") == 0) {
    return Sock(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER));
  }
  if (strcmp(arg, "netlink-route") == 0) {
    return Sock(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  }
  /* The kernel's extension points and the keyrings (case 15). */
  if (strcmp(arg, "io_uring_setup") == 0)
    return Check(syscall(SYS_io_uring_setup, 1, WRONG_POINTER));
  if (strcmp(arg, "io_uring_enter") == 0) {
    return Check(syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
  }
  if (strcmp(arg, "io_uring_register") == 0) {
    return Check(syscall(SYS_io_uring_register, -1, 0, NULL, 0));
  }
  if (strcmp(arg, "bpf") == 0) return Check(syscall(SYS_bpf, 0 /* MAP_CREATE */, WRONG_POINTER, 8));
  if (strcmp(arg, "perf_event_open") == 0) {
    return Check(syscall(SYS_perf_event_open, WRONG_POINTER, 0, -1, -1, 0));
  }
  if (strcmp(arg, "userfaultfd") == 0) { /* real: user-mode faults need no sysctl */
    return Sock(syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY));
  }
  if (strcmp(arg, "keyctl") == 0) { /* real */
    return Check(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
  }
  if (strcmp(arg, "add_key") == 0) { /* real */
    return Check(syscall(SYS_add_key, "user", "cordon-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING));
  }
  if (strcmp(arg, "request_key") == 0) {
    return Check(syscall(SYS_request_key, "user", WRONG_POINTER, NULL, 0));
  }
  /* Attack surface flatpak and Docker deny (case 17). */
  if (strcmp(arg, "modify_ldt") == 0) return Check(syscall(SYS_modify_ldt, 0, WRONG_POINTER, 16));
  if (strcmp(arg, "move_pages") == 0) {
    return Check(syscall(SYS_move_pages, 0, 1, WRONG_POINTER, NULL, WRONG_POINTER, 0));
  }
  if (strcmp(arg, "mbind") == 0)
    return Check(syscall(SYS_mbind, WRONG_POINTER, 4096, 0, NULL, 0, 0));
  if (strcmp(arg, "migrate_pages") == 0) {
    return Check(syscall(SYS_migrate_pages, 0, 64, WRONG_POINTER, WRONG_POINTER));
  }
  /* Sockets (cases 16, 17, 18); all real. */
  if (strcmp(arg, "socket-families") == 0) {
    SocketFamilies();
    return 0;
  }
  if (strcmp(arg, "vsock") == 0) return Sock(socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (strcmp(arg, "socket64-vsock") == 0) { /* the kernel reads an int */
    return Sock(syscall(SYS_socket, (1L << 32) | AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
  }
  if (strcmp(arg, "socket64-inet") == 0) {
    return Sock(syscall(SYS_socket, (1L << 32) | AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  }
  if (strcmp(arg, "socket64-packet") == 0) {
    return Sock(syscall(SYS_socket, (0xffffffffL << 32) | AF_PACKET, SOCK_RAW | SOCK_CLOEXEC,
                        htons(ETH_P_ALL)));
  }
  if (strcmp(arg, "raw4") == 0) return Sock(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP));
  if (strcmp(arg, "raw6") == 0) {
    return Sock(socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6));
  }
  if (strcmp(arg, "packet") == 0) {
    return Sock(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  }
  if (strcmp(arg, "packet-dgram") == 0) {
    return Sock(socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  }
  if (strcmp(arg, "inet-packet") == 0) { /* the obsolete SOCK_PACKET */
    return Sock(socket(AF_INET, SOCK_PACKET | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  }
  if (strcmp(arg, "ping4") == 0)
    return Sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_ICMP));
  if (strcmp(arg, "ping6") == 0) {
    return Sock(socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_ICMPV6));
  }
  /* Other ABIs (case 16): i386 numbers through int 0x80, x32 numbers. */
  if (strcmp(arg, "i386-getpid") == 0) return Int80(20, 0, 0, 0);
  if (strcmp(arg, "i386-ptrace") == 0) return Int80(26, 2 /* PEEKDATA */, 0, 0);
  if (strcmp(arg, "i386-mount") == 0) return Int80(21, 1, 1, 1);
  if (strcmp(arg, "i386-unshare") == 0) return Int80(310, CLONE_NEWUSER, 0, 0);
  if (strcmp(arg, "x32-ptrace") == 0) return Check(syscall(X32_BIT | 521, 2, 0, 0, 0));
  if (strcmp(arg, "x32-mount") == 0) return Check(syscall(X32_BIT | 165, 1, 1, 1, 0, 0));
  if (strcmp(arg, "x32-unshare") == 0) return Check(syscall(X32_BIT | 272, CLONE_NEWUSER));
  /* The clock (case 28): real, 5 s forward; the test watches the host's. */
  if (strcmp(arg, "clock_settime") == 0) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    now.tv_sec += 5;
    return Check(clock_settime(CLOCK_REALTIME, &now));
  }
  if (strcmp(arg, "settimeofday") == 0)
    return Check(syscall(SYS_settimeofday, WRONG_POINTER, NULL));
  if (strcmp(arg, "adjtimex") == 0) { /* real: ADJ_SETOFFSET by 5 s */
    struct timex tx = {.modes = ADJ_SETOFFSET | ADJ_NANO};
    tx.time.tv_sec = 5;
    return Check(adjtimex(&tx));
  }
  if (strcmp(arg, "adjtimex-read") == 0) { /* reading needs no privilege */
    struct timex tx = {.modes = 0};
    return Check(adjtimex(&tx));
  }
  /* The host-facing classes (escape_host_test.cc). */
  if (strcmp(arg, "tty-inject") == 0) return TtyInject();
  if (strncmp(arg, "signals:", 8) == 0) return Signals(arg + 8);
  if (strncmp(arg, "connect4:", 9) == 0) return ConnectInet(arg + 9, AF_INET);
  if (strncmp(arg, "connect6:", 9) == 0) return ConnectInet(arg + 9, AF_INET6);
  if (strncmp(arg, "connect-abstract:", 17) == 0) return ConnectUnix(arg + 17, 1);
  if (strncmp(arg, "connect-unix:", 13) == 0) return ConnectUnix(arg + 13, 0);
  if (strncmp(arg, "exhaust-", 8) == 0) { /* exhaust-WHAT:WHERE */
    char what[32];
    const char* colon = strchr(arg, ':');
    size_t len = colon ? (size_t)(colon - arg - 8) : 0;
    if (!colon || len >= sizeof what) return EINVAL;
    memcpy(what, arg + 8, len);
    what[len] = 0;
    return Exhaust(what, colon + 1);
  }
  if (strncmp(arg, "exit:", 5) == 0) { /* ends here, with this status */
    fflush(stdout);
    _exit(atoi(arg + 5));
  }
  /* The /proc and descriptor classes (cases 1, 2, 3, 5, 11, 13). */
  if (strcmp(arg, "fds") == 0) return ListFds();
  if (strcmp(arg, "cwd") == 0) return Cwd("cwd");
  if (strncmp(arg, "climb:", 6) == 0) return Climb(arg + 6);
  if (strcmp(arg, "fd-climb") == 0) return FdClimb();
  if (strncmp(arg, "wait-fifo:", 10) == 0) return WaitFifo(arg + 10);
  if (strncmp(arg, "exe-write:", 10) == 0) return ExeWrite(arg + 10);
  if (strncmp(arg, "exe-race:", 9) == 0) return ExeRace(arg + 9, 1000);
  if (strcmp(arg, "proc1-window") == 0) return Proc1Window();
  if (strncmp(arg, "writefile:", 10) == 0) { /* real: writefile:PATH=VALUE */
    char path[4096];
    snprintf(path, sizeof path, "%s", arg + 10);
    char* eq = strchr(path, '=');
    if (eq == NULL) return EINVAL;
    *eq = '\0';
    return WriteFile(path, eq + 1);
  }
  if (strcmp(arg, "unshare-cgroup") == 0) return Check(unshare(CLONE_NEWCGROUP | CLONE_NEWNS));
  if (strcmp(arg, "mount-cgroup1") == 0) return CgroupV1ReleaseAgent(); /* real */
  if (strcmp(arg, "mount-cgroup2") == 0) {                              /* real */
    mkdir("/tmp/.probe-cgroup2", 0700);
    return Check(mount("cgroup2", "/tmp/.probe-cgroup2", "cgroup2", 0, NULL));
  }
  if (strcmp(arg, "mount-binfmt") == 0) { /* real */
    mkdir("/tmp/.probe-binfmt", 0700);
    return Check(mount("binfmt_misc", "/tmp/.probe-binfmt", "binfmt_misc", 0, NULL));
  }
  if (strcmp(arg, "raise-core") == 0) return RaiseRlimit(RLIMIT_CORE);
  if (strcmp(arg, "raise-nproc") == 0) return RaiseRlimit(RLIMIT_NPROC);
  if (strcmp(arg, "abort") == 0) { /* real: the default action dumps core */
    signal(SIGABRT, SIG_DFL);
    abort();
  }
  fprintf(stderr, "try-syscall: unknown call \"%s\"\n", arg);
  return ENOENT;
}

int main(int argc, char** argv) {
  int last = 0;
  for (int i = 1; i < argc; ++i) {
    last = Try(argv[i]);
    printf("%s %d\n", argv[i], last);
    fflush(stdout);
  }
  return last;
}

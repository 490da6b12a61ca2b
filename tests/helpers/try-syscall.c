/* try-syscall: tries the system calls its arguments name, one each, and
 * prints "NAME ERRNO" for every one (0: the call succeeded); the exit
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <sys/wait.h>
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

/* An i386 system call through int 0x80 from this 64-bit process: seccomp
 * sees it as AUDIT_ARCH_I386, with i386 numbers. */
static int Int80(long nr, long a, long b, long c) {
#if defined(__x86_64__)
  long rc;
  __asm__ volatile("int $0x80"
                   : "=a"(rc)
                   : "a"(nr), "b"(a), "c"(b), "d"(c), "S"(0L), "D"(0L)
                   : "memory");
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

#!/bin/sh
# The guest side of a cell (tests/hosts/hosts.py boots it; tests/hosts/init
# switch_roots into the host's root, read-only over 9p under a tmpfs overlay,
# and runs this as PID 1).
#
# Stage 1 (PID 1): mounts the API filesystems, then execs busybox init, so
# that something reaps orphans as systemd would (a SIGKILLed daemon's
# sandboxes are reparented to PID 1; unreaped zombies would look like
# survivors to the restarted daemon). init runs stage 2 once.
#
# Stage 2: shapes the host as the kernel command line says, runs the cell's
# work, leaves its results in /results (the per-cell directory on the host,
# writable over 9p), prints them between markers on the serial console, and
# powers off.
#   cordon.cell=NAME      the cell's name
#   cordon.mode=smoke|full
#   cordon.cg=v2|hybrid   pure cgroup2 at /sys/fs/cgroup, or v1 memory, pids
#                         and cpu plus cgroup2 at /sys/fs/cgroup/unified
#   cordon.place=root|service|user-delegated|user-plain
#   cordon.state=tmpfs|ext4
#   cordon.userns=0       user.max_user_namespaces=0
#   cordon.repo=DIR       the repository (its build/ holds the binaries)
#   cordon.build=DIR      the binaries (hosts.py's snapshot of build/)
#   cordon.python=0       the smoke skips its python session (time budget)
#   cordon.suites=a,b     full mode: only these suites (suites.py)
#   cordon.suite_timeout=N  full mode: seconds per suite
#   cordon.tests=DIR      full mode: the build tree whose test binaries run
self=$0

arg() {
  for a in $(cat /proc/cmdline); do
    case $a in "cordon.$1="*) echo "${a#cordon.$1=}"; return ;; esac
  done
  echo "$2"
}

if [ "$$" = 1 ]; then
  mount -t proc proc /proc
  mount -t sysfs sys /sys
  mount -t devtmpfs dev /dev
  # The links udev or systemd make on every distribution (devtmpfs has
  # none): a script run by descriptor is read by its interpreter at
  # /dev/fd/N.
  ln -sfn /proc/self/fd /dev/fd
  ln -sfn /proc/self/fd/0 /dev/stdin
  ln -sfn /proc/self/fd/1 /dev/stdout
  ln -sfn /proc/self/fd/2 /dev/stderr
  mkdir -p /dev/pts /dev/shm
  mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
  mount -t tmpfs -o mode=1777 tmpfs /dev/shm
  # The checkout may live under /tmp or /run (a CI's clean clone does):
  # kept visible through the fresh tmpfs mounts, bound aside and back.
  repo=$(arg repo /)
  case $repo in /tmp/* | /run/*) covered=1 ;; *) covered=0 ;; esac
  if [ "$covered" = 1 ]; then
    mkdir -p /mnt/.cordon-repo
    mount --bind "$repo" /mnt/.cordon-repo
  fi
  mount -t tmpfs -o mode=1777 tmpfs /tmp
  mount -t tmpfs -o mode=755 tmpfs /run
  if [ "$covered" = 1 ]; then
    mkdir -p "$repo"
    mount --bind /mnt/.cordon-repo "$repo"
  fi
  echo 1 >/proc/sys/kernel/sysrq
  cat >/etc/inittab <<EOF
::sysinit:/bin/sh $self stage2
EOF
  exec /bin/busybox init
fi

[ "$1" = stage2 ] || { echo "guest.sh: run by the cell's init" >&2; exit 2; }

cell=$(arg cell unknown)
mode=$(arg mode smoke)
cg=$(arg cg v2)
place=$(arg place root)
state=$(arg state tmpfs)
userns=$(arg userns 1)
python=$(arg python 1)
bindir=$(arg build "$repo/build")
suites=$(arg suites all)
suite_timeout=$(arg suite_timeout 2400)
repo=$(arg repo /work/main)
tests=$(arg tests "$repo/build")
results=/results
here=$repo/tests/hosts

finish() {
  sync
  echo "CORDON-CELL-END $cell rc=$1"
  echo o >/proc/sysrq-trigger
  sleep 30
}

exec </dev/null
echo "CORDON-CELL-BEGIN uptime=$(cut -d' ' -f1 /proc/uptime) $cell kernel=$(uname -r) cg=$cg place=$place state=$state userns=$userns mode=$mode"
busybox hostname "cell-$cell" 2>/dev/null
busybox ip link set lo up

# cgroups, as a distribution mounts them.
case $cg in
  v2)
    mount -t cgroup2 -o nsdelegate,memory_recursiveprot none /sys/fs/cgroup 2>/dev/null ||
      mount -t cgroup2 -o nsdelegate none /sys/fs/cgroup
    ;;
  hybrid)
    mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
    for c in memory pids cpu; do
      mkdir -p /sys/fs/cgroup/$c
      mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c
    done
    mkdir -p /sys/fs/cgroup/unified
    mount -t cgroup2 -o nsdelegate none /sys/fs/cgroup/unified
    ;;
esac

if [ "$userns" = 0 ]; then
  echo 0 >/proc/sys/user/max_user_namespaces
fi

# An unprivileged user of the guest only (the overlay's /etc is writable).
user=cordtest
uid=2000
echo "$user:x:$uid:$uid:cordon cell user:/tmp/home-$user:/bin/sh" >>/etc/passwd
echo "$user:x:$uid:" >>/etc/group
mkdir -p /tmp/home-$user && chown $uid:$uid /tmp/home-$user

# The state directory.
case $place in user-*) statedir=/tmp/home-$user/state ;; *) statedir=/var/lib/cordon ;; esac
mkdir -p "$statedir"
case $state in
  tmpfs) mount -t tmpfs -o mode=700,size=1g tmpfs "$statedir" ;;
  ext4)
    truncate -s 1G /tmp/state.img
    mkfs.ext4 -q -F -O quota,project /tmp/state.img
    mount -o loop,prjquota /tmp/state.img "$statedir" || echo "CORDON-NOTE ext4 loop mount failed"
    ;;
esac
case $place in user-*) chown $uid:$uid "$statedir" ;; esac
chmod 700 "$statedir"

# Where the daemon runs, as its service manager would put it.
v2=/sys/fs/cgroup
[ "$cg" = hybrid ] && v2=/sys/fs/cgroup/unified
enable() { # enable memory, pids, cpu below $1 (those the tree has)
  for c in memory pids cpu; do echo "+$c" >"$1/cgroup.subtree_control" 2>/dev/null; done
}
group=$v2
case $place in
  service)
    group=$v2/system.slice/cordon.service
    mkdir -p "$group"
    enable "$v2"
    enable "$v2/system.slice"
    ;;
  user-delegated)
    # As user@.service: the user's manager owns its group and delegates.
    u=$v2/user.slice/user-$uid.slice/user@$uid.service
    mkdir -p "$u/app.slice/cordon.service"
    enable "$v2"
    enable "$v2/user.slice"
    enable "$v2/user.slice/user-$uid.slice"
    enable "$u"
    enable "$u/app.slice"
    chown -R $uid:$uid "$u"
    group=$u/app.slice/cordon.service
    ;;
  user-plain)
    # A login session's scope: root's, nothing delegated.
    group=$v2/user.slice/user-$uid.slice/session-1.scope
    mkdir -p "$group"
    ;;
esac
echo $$ >"$group/cgroup.procs" || echo "CORDON-NOTE could not enter $group"

case $place in
  user-*) as_user="setpriv --reuid=$uid --regid=$uid --clear-groups --" ;;
  *) as_user="" ;;
esac
export HOME=/root PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8
case $place in user-*) export HOME=/tmp/home-$user ;; esac
chmod 777 "$results"

start=$(cut -d' ' -f1 /proc/uptime)
if [ "$mode" = cmd ]; then
  # For a person debugging a cell: /results/cmd.sh, put there beforehand.
  sh "$results/cmd.sh" >"$results/cmd.log" 2>&1
  rc=$?
elif [ "$mode" = full ]; then
  [ "$suites" != all ] && export HOSTS_SUITES="$(echo "$suites" | tr , ' ')"
  $as_user /usr/bin/python3 "$here/suites.py" --repo "$repo" --build "$bindir" --out "$results" --cell "$cell" \
    --timeout "$suite_timeout" --tests "$tests" >"$results/suites.log" 2>&1
  rc=$?
  tail -n 40 "$results/suites.log"
else
  nopy=""
  [ "$python" = 0 ] && nopy=--no-python
  $as_user /usr/bin/python3 "$here/smoke.py" --repo "$repo" --state-dir "$statedir" \
    --build "$bindir" --out "$results" --cell "$cell" $nopy 2>&1
  rc=$?
fi
end=$(cut -d' ' -f1 /proc/uptime)
echo "CORDON-CELL-TIME $cell boot_to_start=${start}s work=$(echo "$end $start" | awk '{print $1-$2}')s"
finish $rc

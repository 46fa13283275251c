#!/bin/busybox sh
# PID 1 of the kernel lab's initramfs (busybox-static). Loads the few modules needed to reach the root
# filesystem, mounts the host's root filesystem (9p tag `hostroot`, read-only) under a tmpfs overlay, the
# lab's work folder (9p tag `kl`, read-write) at /kl, and the guest kernel's module tree (from the host's
# cache, so modprobe of the host's kmod loads sch_netem, batman-adv, nf_tables ... on demand), then hands
# PID 1 to the agent (tests/kernel_lab/agent.py, run by the host's Python) in the new root.
# Kernel command line: kl.modules=<cache dir with lib/modules> kl.agent=<path> kl.python=<path>
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
for m in $($B cat /modules.order); do $B insmod "/modules/$m" || echo "kernel-lab: insmod $m failed"; done
for w in $($B cat /proc/cmdline); do
  case $w in kl.modules=*) MODS=${w#*=};; kl.agent=*) AGENT=${w#*=};; kl.python=*) PY=${w#*=};; esac
done
KVER=$($B uname -r)
$B mkdir -p /lower /rw /root
# cache=loose: the lower layer is read-only and does not change during a run; caching it in the guest
# makes the host Python's imports several times faster than cache=none.
$B mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /lower || exec $B sh
$B mount -t tmpfs -o mode=0755 tmpfs /rw
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /root || exec $B sh
for d in proc sys dev; do $B mount --move /$d /root/$d; done
$B mount -t tmpfs tmpfs /root/run      # the host's /run (its netns files, sockets) is not the guest's
# A fresh /tmp, unless the project (the agent, its Python) lives below the host's /tmp (a CI clone may): then the
# host's /tmp stays visible, written to in the overlay's tmpfs upper layer like the rest of the root.
case "$AGENT $PY" in */tmp/*) ;; *) $B mount -t tmpfs tmpfs /root/tmp;; esac
$B mkdir -p /root/run/netns /root/var/run /root/kl /root/lib/modules/$KVER
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 kl /root/kl || exec $B sh
$B mount --bind "/lower$MODS/lib/modules/$KVER" /root/lib/modules/$KVER
$B mount -t debugfs debugfs /root/sys/kernel/debug 2>/dev/null
$B mount -t cgroup2 cgroup2 /root/sys/fs/cgroup 2>/dev/null
$B mkdir -p /root/dev/pts /root/dev/shm
$B mount -t devpts devpts /root/dev/pts
$B mount -t tmpfs tmpfs /root/dev/shm
$B umount /lower 2>/dev/null   # still mounted as the overlay's lower layer; only the name goes
exec $B switch_root /root "$PY" "$AGENT"

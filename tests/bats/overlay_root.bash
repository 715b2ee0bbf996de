# A throwaway copy of this machine: an overlay of / whose changes go to
# a test's dir, so that a test can `make install` into /usr/local or boot
# systemd with kvtools' units in place and change nothing of the host.
# Loaded by install.bats and systemd.bats.

# overlay_requires DIR: skip unless an overlay of / can be mounted here
# (root, mount namespaces, overlayfs); make DIR's upper and work dirs.
overlay_requires() {
	requires root unshare chroot
	mkdir -p "$1/up" "$1/work" "$1/m"
	unshare -m sh -c "mount -t overlay overlay -o lowerdir=/,upperdir='$1/up',workdir='$1/work' '$1/m'" \
		2>/dev/null || skip "cannot mount an overlay of / here"
}

# in_overlay DIR CMD: the shell command CMD as root, chrooted into an
# overlay of / with DIR's changes (mount namespace of its own; /proc,
# /sys and /dev the host's).  What CMD writes lands under DIR/up.
in_overlay() {
	unshare -m sh -ec '
		d=$1; m=$1/m
		mount --make-rprivate /
		mount -t overlay overlay -o "lowerdir=/,upperdir=$d/up,workdir=$d/work" "$m"
		for f in proc sys dev; do mount --rbind "/$f" "$m/$f"; done
		exec chroot "$m" sh -ec "$2"' overlay "$1" "$2"
}

# overlay_boot DIR: systemd as PID 1 of namespaces of its own on an
# overlay of / with DIR's changes, as systemd-nspawn boots a container:
# /sys and /proc/sys read-only, a /dev of the few devices, an empty /run
# and /tmp, no network, its own cgroup under the host's cgroup2 tree.
# Sets BOOT_PID (systemd's pid, for in_boot); boot_stop ends it.
overlay_boot() {
	local d=$1 cgroot n
	cgroot=$(findmnt -n -t cgroup2 -o TARGET | head -1)
	[ -n "$cgroot" ] || skip "no cgroup2 hierarchy for the container's systemd"
	BOOT_CG=$cgroot/kvtools-test.$$.$BATS_TEST_NUMBER
	mkdir "$BOOT_CG" || skip "cannot make a cgroup under $cgroot"
	(
		echo "$BASHPID" > "$BOOT_CG/cgroup.procs"
		exec unshare -C --fork --pid --mount --uts --ipc --net sh -ec '
			d=$1; m=$1/m
			mount --make-rprivate /
			mount -t overlay overlay -o "lowerdir=/,upperdir=$d/up,workdir=$d/work" "$m"
			mount -t proc proc "$m/proc"
			mount --bind "$m/proc/sys" "$m/proc/sys"
			mount -o remount,bind,ro "$m/proc/sys"
			mount -t sysfs -o ro sysfs "$m/sys"
			mount -t cgroup2 cgroup2 "$m/sys/fs/cgroup"
			mount -t tmpfs -o mode=755 tmpfs "$m/dev"
			for n in null zero full random urandom tty; do
				touch "$m/dev/$n"
				mount --bind "/dev/$n" "$m/dev/$n"
			done
			mkdir "$m/dev/pts" "$m/dev/shm"
			mount -t devpts -o newinstance,ptmxmode=0666 devpts "$m/dev/pts"
			ln -s pts/ptmx "$m/dev/ptmx"
			mount -t tmpfs tmpfs "$m/run"
			mount -t tmpfs tmpfs "$m/tmp"
			exec chroot "$m" /usr/bin/env container=kvtools-test /lib/systemd/systemd \
				--unit=basic.target' boot "$d"
	) >"$d/boot.log" 2>&1 &
	BOOT_UNSHARE=$!
	for n in $(seq 100); do
		BOOT_PID=$(pgrep -P "$BOOT_UNSHARE" -x systemd || true)
		# A unit of the host's that fails in a container leaves it
		# degraded, and booted.
		[ -n "$BOOT_PID" ] && [[ $(in_boot systemctl is-system-running --wait 2>/dev/null) == @(running|degraded) ]] &&
			return 0
		kill -0 "$BOOT_UNSHARE" 2>/dev/null || break
		sleep 0.2
	done
	boot_stop
	skip "systemd does not boot in a container here: $(cat "$d/boot.log")"
}

# in_boot CMD...: CMD inside the booted container.
in_boot() {
	nsenter -t "$BOOT_PID" -m -p -u -i -n -r -w "$@"
}

# boot_stop: end the container (all of its processes) and its cgroups.
boot_stop() {
	if [ -n "${BOOT_PID:-}" ]; then
		kill -KILL "$BOOT_PID" 2>/dev/null || true
		BOOT_PID=
	fi
	if [ -n "${BOOT_UNSHARE:-}" ]; then
		wait "$BOOT_UNSHARE" 2>/dev/null || true
		BOOT_UNSHARE=
	fi
	[ -z "${BOOT_CG:-}" ] || find "$BOOT_CG" -depth -type d -exec rmdir {} + 2>/dev/null || true
}

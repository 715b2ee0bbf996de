#!/usr/bin/env bats
# kvtools on a real distributed filesystem: a one-brick GlusterFS volume
# served from this machine and mounted twice (two nodes) over FUSE; the
# checks of tests/bats/shared_volume.bash.  Skips with the reason where
# glusterd cannot run.  GlusterFS refuses loopback addresses for bricks,
# so the brick is named by this machine's first global IPv4 address, or
# by one on a dummy interface made for the run.

load test_helper
load shared_volume
load last_use

setup_file() {
	export GL_SKIP=
	if [ "$(id -u)" -ne 0 ]; then GL_SKIP="needs root"; return; fi
	if ! command -v glusterd >/dev/null || ! command -v gluster >/dev/null; then
		GL_SKIP="needs glusterfs-server"; return
	fi
	[ -c /dev/fuse ] || { GL_SKIP="no /dev/fuse"; return; }
	GL_ADDR=$(ip -4 -o addr show scope global 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
	export GL_DUMMY=
	if [ -z "$GL_ADDR" ]; then
		ip link add kvgl0 type dummy 2>/dev/null && ip addr add 10.254.254.1/32 dev kvgl0 &&
			ip link set kvgl0 up || { GL_SKIP="no non-loopback address for a brick"; return; }
		GL_ADDR=10.254.254.1 GL_DUMMY=kvgl0
	fi
	export GL_ADDR
	export GL_STARTED=
	if ! pgrep -x glusterd >/dev/null; then
		glusterd || { GL_SKIP="glusterd does not start"; return; }
		GL_STARTED=1
	fi
	export GL_VOL=kvtools$$
	local brick=$BATS_FILE_TMPDIR/brick i
	mkdir -p "$brick"
	for i in 1 2 3 4 5 6 7 8 9 10; do
		gluster --mode=script volume create "$GL_VOL" "$GL_ADDR:$brick/b" force \
			>/dev/null 2>&1 && break
		sleep 1		# glusterd answers once its management port is up
	done
	gluster --mode=script volume start "$GL_VOL" >/dev/null 2>&1 ||
		{ GL_SKIP="cannot create and start a volume"; return; }
}

teardown_file() {
	[ -n "${GL_VOL:-}" ] || return 0
	gluster --mode=script volume stop "$GL_VOL" force >/dev/null 2>&1 || true
	gluster --mode=script volume delete "$GL_VOL" >/dev/null 2>&1 || true
	if [ -n "${GL_STARTED:-}" ]; then
		pkill -x glusterd || true
		# gone before another run looks for one
		while pgrep -x glusterd >/dev/null; do sleep 0.1; done
	fi
	[ -z "${GL_DUMMY:-}" ] || ip link del "$GL_DUMMY" 2>/dev/null || true
}

setup() {
	common_setup
	[ -z "$GL_SKIP" ] || skip "$GL_SKIP"
	requires jq
	# each test its own dir on the volume, seen from two mounts
	A=$BATS_TEST_TMPDIR/a
	B=$BATS_TEST_TMPDIR/b
	mkdir -p "$A" "$B"
	mount -t glusterfs "$GL_ADDR:/$GL_VOL" "$A" || skip "cannot mount the volume"
	mount -t glusterfs "$GL_ADDR:/$GL_VOL" "$B"
	DIR=t$BATS_TEST_NUMBER
	rm -rf "${A:?}/$DIR"
	mkdir "$A/$DIR"
	A=$A/$DIR B=$B/$DIR
	sv_env
}

teardown() {
	sv_teardown "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b"
}

@test "glusterfs: put, list, get, verify, check and evict" {
	sv_one_node
}

@test "glusterfs: two nodes share the volume: writers on both, kvevict on one; no torn block, nothing outside the layout deleted" {
	sv_two_nodes
}

@test "glusterfs: kvoffd writes behind onto it, another node's kvoffd reads through from it" {
	sv_offd
}

@test "glusterfs: two nodes, one kvevict shard on each, delete what one run deletes" {
	requires python3
	sv_shards
}

@test "glusterfs: two nodes: kvwatch sees the reads on one, kvevict on the other evicts by them" {
	sv_kvwatch
}

#!/bin/bash
# A real S3 server for the tests: a one-node Ceph cluster (one monitor,
# one OSD on memstore, i.e. in memory) and its RADOS Gateway on
# 127.0.0.1, everything under one scratch directory.
#
#   s3server.sh start DIR   start it; DIR/env is a sourceable file with
#                           the endpoint and the keys
#   s3server.sh stop DIR    stop the daemons and remove DIR
#
# start exits 77 with one line on stderr saying why when the packages
# are missing or a daemon does not start (tests skip with that line).
# See /work/shared/S3-TEST-SERVER.md for the facts this rests on.
set -u

prog=s3server.sh
daemons="mon.a osd.0 client.rgw.a"

usage() {
	echo "usage: $prog start|stop DIR" >&2
	exit 2
}

# A free TCP port on 127.0.0.1, probed by binding port 0; several at
# once are distinct since all stay bound until the last is read.
free_ports() {
	python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# The last lines of the first of the logs that is not empty, on one line.
log_tail() {
	local f
	for f in "$@"; do
		[ -s "$f" ] || continue
		tail -n 3 "$f" | tr -s '\n\t' '  ' | cut -c1-400
		return
	done
	echo "(nothing in $*)"
}

# stop_daemons DIR: TERM each daemon by its pid file, KILL what is left
# after 1 s (a gateway takes 6 s to stop, an OSD or a monitor 2, and
# with all in memory and DIR removed next there is nothing to save), and
# wait until all have gone.
stop_daemons() {
	local dir=$1 name pid pids=''
	for name in $daemons; do
		[ -r "$dir/run/$name.pid" ] || continue
		pid=$(cat "$dir/run/$name.pid" 2>/dev/null) || continue
		case $pid in '' | *[!0-9]*) continue ;; esac
		# only a Ceph daemon: a stale pid file may name a reused pid
		grep -qa -e ceph-mon -e ceph-osd -e radosgw "/proc/$pid/cmdline" 2>/dev/null ||
			continue
		kill -TERM "$pid" 2>/dev/null && pids="$pids $pid"
	done
	pids=$(wait_gone 10 $pids)
	[ -z "$pids" ] && return 0
	for pid in $pids; do kill -KILL "$pid" 2>/dev/null; done
	wait_gone 50 $pids >/dev/null
}

# wait_gone TENTHS PID...: wait up to TENTHS tenths of a second for the
# pids to exit; print those still alive.
wait_gone() {
	local n=$1 pid alive i
	shift
	for i in $(seq "$n"); do
		alive=
		for pid in "$@"; do
			kill -0 "$pid" 2>/dev/null && alive="$alive $pid"
		done
		# shellcheck disable=SC2086
		set -- $alive
		[ $# -eq 0 ] && return 0
		sleep 0.1
	done
	echo "$@"
}

# skip77 WHY [LOG...]: stop what started, say why on one line with the
# tail of the first LOG not empty, exit 77.
skip77() {
	local msg="$prog: $1"
	shift
	[ $# -eq 0 ] || msg="$msg: $(log_tail "$@")"
	stop_daemons "$DIR"
	echo "$msg" >&2
	exit 77
}

elapsed() {
	echo $(( $(date +%s%N) / 1000000 - T0 ))
}

cmd_start() {
	local c cmon crgw mport rport fsid conf ak sk i code tries osd_uuid deadline
	for c in ceph ceph-mon ceph-osd monmaptool radosgw radosgw-admin python3 curl; do
		command -v "$c" >/dev/null ||
			{ echo "$prog: needs $c (radosgw ceph-mon ceph-osd curl)" >&2; exit 77; }
	done
	[ ! -e "$DIR/env" ] || { echo "$prog: $DIR already holds a server" >&2; exit 1; }
	mkdir -p "$DIR"/{mon,osd,rgw,run,log,crash} || exit 1
	DIR=$(cd "$DIR" && pwd -P)
	T0=$(( $(date +%s%N) / 1000000 ))
	read -r mport rport < <(free_ports 2) ||
		{ echo "$prog: cannot find free ports" >&2; exit 77; }
	fsid=$(cat /proc/sys/kernel/random/uuid)
	conf=$DIR/ceph.conf
	cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$mport
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr2 = false
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon allow pool delete = true
mon max pg per osd = 1000
# rgw creates its pools one osdmap epoch each: propose them sooner
paxos propose interval = 0.1
paxos min wait = 0.01
mon warn on pool no redundancy = false
osd objectstore = memstore
memstore device bytes = 1073741824
osd crush chooseleaf type = 0
osd crush update on start = false
osd class update on start = false
run dir = $DIR/run
crash dir = $DIR/crash
pid file = $DIR/run/\$name.pid
# none: nothing here uses one, and a long DIR would overflow a unix
# socket's 107 bytes
admin socket =
log file = $DIR/log/\$name.log
mon cluster log file = $DIR/log/cluster.log
keyring = $DIR/keyring
log to stderr = false
err to stderr = false

[mon.a]
mon data = $DIR/mon

[osd.0]
osd data = $DIR/osd
osd journal = $DIR/osd/journal

[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$rport
rgw data = $DIR/rgw
rgw enable usage log = false
EOF
	: >"$DIR/keyring"
	# A command now and then reaches the monitor before the client has its
	# monmap and goes with fsid 0, refused "wrong fsid" (EPERM): try again.
	# Only idempotent commands go through here.  The last try's output is
	# in log/step.out, all of them in log/setup.log.
	ceph_() {
		local i
		for i in 1 2 3 4 5 6 7 8 9 10; do
			timeout 60 ceph -c "$conf" --connect-timeout 30 "$@" \
				>"$DIR/log/step.out" 2>&1 </dev/null
			local rc=$?
			cat "$DIR/log/step.out" >>"$DIR/log/setup.log"
			[ "$rc" -ne 0 ] || return 0
			sleep 0.5
		done
		return 1
	}
	osd_uuid=$(cat /proc/sys/kernel/random/uuid)

	monmaptool --create --addv a "[v1:127.0.0.1:$mport]" --fsid "$fsid" \
		"$DIR/monmap" >"$DIR/log/setup.log" 2>&1 ||
		skip77 "monmaptool failed" "$DIR/log/setup.log"
	ceph-mon -c "$conf" --mkfs -i a --monmap "$DIR/monmap" \
		>>"$DIR/log/setup.log" 2>&1 </dev/null ||
		skip77 "ceph-mon --mkfs failed" "$DIR/log/setup.log"
	ceph-mon -c "$conf" -i a >>"$DIR/log/setup.log" 2>&1 </dev/null ||
		skip77 "ceph-mon does not start" "$DIR/log/mon.a.log" "$DIR/log/setup.log"
	ceph_ osd create "$osd_uuid" ||
		skip77 "the monitor does not answer on port $mport" "$DIR/log/step.out"
	cmon=$(elapsed)
	ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$DIR/log/setup.log" 2>&1 </dev/null ||
		skip77 "ceph-osd --mkfs failed" "$DIR/log/setup.log"
	ceph-osd -c "$conf" -i 0 >>"$DIR/log/setup.log" 2>&1 </dev/null ||
		skip77 "ceph-osd does not start" "$DIR/log/osd.0.log" "$DIR/log/setup.log"
	ceph_ osd crush add osd.0 1.0 host=localhost root=default ||
		skip77 "cannot add osd.0 to the crush map" "$DIR/log/step.out"
	# bounded: the gateway answers once its pools exist on the OSD; one
	# that exited (the fsid race above, in its pool commands) starts again
	code='' tries=0 i=0 deadline=$((SECONDS + 60))
	while [ "$SECONDS" -lt "$deadline" ]; do
		i=$((i + 1))
		if [ "$i" -eq 1 ] || ! kill -0 "$(cat "$DIR/run/client.rgw.a.pid" 2>/dev/null)" 2>/dev/null; then
			[ "$tries" -lt 3 ] || skip77 "radosgw exited" "$DIR/log/client.rgw.a.log"
			tries=$((tries + 1))
			radosgw -c "$conf" -n client.rgw.a >"$DIR/log/step.out" 2>&1 </dev/null ||
				skip77 "radosgw does not start" "$DIR/log/step.out" \
					"$DIR/log/client.rgw.a.log"
			cat "$DIR/log/step.out" >>"$DIR/log/setup.log"
		fi
		code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$rport/")
		[ "$code" = 200 ] && break
		sleep 0.1
	done
	[ "$code" = 200 ] ||
		skip77 "radosgw on port $rport does not answer 200 in 60 s (last $code)" \
			"$DIR/log/client.rgw.a.log"
	crgw=$(elapsed)
	ak=KV$(tr -dc 'A-Z0-9' </dev/urandom | head -c 18)
	sk=$(tr -dc 'A-Za-z0-9' </dev/urandom | head -c 40)
	for i in 1 2 3 4 5; do
		timeout 60 radosgw-admin -c "$conf" user create --uid=kv --display-name=kv \
			--access-key="$ak" --secret-key="$sk" >"$DIR/log/user.json" \
			2>>"$DIR/log/setup.log" </dev/null && break
		timeout 60 radosgw-admin -c "$conf" user info --uid=kv >"$DIR/log/user.json" \
			2>>"$DIR/log/setup.log" </dev/null && break
		[ "$i" -lt 5 ] || skip77 "radosgw-admin user create failed" "$DIR/log/setup.log"
		sleep 0.5
	done
	cat >"$DIR/env.tmp" <<EOF
# written by $prog start; source it
export AWS_ENDPOINT_URL=http://127.0.0.1:$rport
export AWS_ACCESS_KEY_ID=$ak
export AWS_SECRET_ACCESS_KEY=$sk
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
export AWS_REQUEST_CHECKSUM_CALCULATION=when_required
export AWS_RESPONSE_CHECKSUM_VALIDATION=when_required
export S3SERVER_DIR=$DIR
export S3SERVER_CONF=$conf
export S3SERVER_PORT=$rport
export S3SERVER_MON_PORT=$mport
EOF
	mv "$DIR/env.tmp" "$DIR/env"
	echo "$prog: up on 127.0.0.1:$rport in $(elapsed) ms (monitor ${cmon} ms, gateway ${crgw} ms)" \
		>"$DIR/log/start-time"
	cat "$DIR/log/start-time" >&2
}

cmd_stop() {
	[ -d "$DIR" ] || return 0
	stop_daemons "$DIR"
	rm -rf "$DIR"
}

[ $# -eq 2 ] || usage
DIR=$2
case $1 in
start) cmd_start ;;
stop) cmd_stop ;;
*) usage ;;
esac

#!/bin/sh
# Install the Debian packages kvtools needs to build, test and benchmark,
# skipping what is already there.  Run as root (or with sudo available).
set -eu
pkgs="make gcc pkg-config python3 python3-dev liburing-dev libhwloc-dev libzstd-dev
libxxhash-dev libisal-dev libjansson-dev libssl-dev libzmq3-dev libmsgpack-dev
python3-zmq python3-msgpack python3-numpy python3-pytest python3-yaml redis-server redis-tools
libfuse3-dev fuse3 glusterfs-server iproute2 openmpi-bin libopenmpi-dev
bats bats-support bats-assert
mandoc attr util-linux procps psmisc zsh bash-completion man-db jq fio
time linux-perf strace
libcurl4-openssl-dev libxml2-dev radosgw ceph-mon ceph-osd rclone awscli python3-boto3"
missing=
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "deps.sh: installing:$missing" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing

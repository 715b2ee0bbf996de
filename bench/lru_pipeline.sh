#!/usr/bin/env bash
# bench/lru_pipeline.sh: exact-LRU eviction as a shell pipeline, the peer
# bench/evict.sh and bench/latfs.sh measure kvevict against.  Frees what
# it takes to bring DIR's filesystem use (as df counts it) down to
# LOW_PCT, oldest atime first:
#
#   find DIR -name '*.bin' -type f -printf '%A@ %s %p\n' | sort -n |
#       awk (take until enough bytes) | xargs -d '\n' rm -f
#
# Bytes are apparent sizes (%s), which is what the blocks of the bench
# trees allocate.
#
# Usage: bench/lru_pipeline.sh DIR LOW_PCT
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bench/lru_pipeline.sh DIR LOW_PCT" >&2; exit 2; }
need=$(df -B1 --output=used,avail "$1" |
	awk -v low="$2" 'NR == 2 { printf "%.0f", $1 - ($1 + $2) * low / 100 }')
# awk stops early, so sort dies of SIGPIPE: that is how it ends.
set +o pipefail
find "$1" -name '*.bin' -type f -printf '%A@ %s %p\n' | sort -n |
	awk -v need="$need" '{ if (freed >= need) exit; freed += $2; print $3 }' |
	xargs -d '\n' rm -f

#!/usr/bin/env bash
# Run the C unit tests and every bats suite against the binaries in
# $BUILD (default build/), then print "N passed, N failed[, N skipped]".
# Unit tests exit 0 (pass), 77 (skip) or anything else (fail).
# Usage: tests/run.sh [SUITE.bats ...]
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build}
export KV_BIN=$PWD/$BUILD/bin
pass=0 fail=0 skip=0
failed=()

if [ $# -eq 0 ]; then
	for t in "$BUILD"/tests/*; do
		case $t in *.so|*.d) continue ;; esac
		[ -f "$t" ] && [ -x "$t" ] || continue
		out=$("$t" 2>&1); rc=$?
		case $rc in
		0) pass=$((pass + 1)); echo "ok unit/${t##*/}" ;;
		77) skip=$((skip + 1)); echo "ok unit/${t##*/} # skip ${out##*$'\n'}" ;;
		*) fail=$((fail + 1)); failed+=("unit/${t##*/}")
		   echo "not ok unit/${t##*/}"; printf '%s\n' "$out" | sed 's/^/#   /' ;;
		esac
	done
	set -- tests/bats/*.bats
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bats --tap "$@" | tee "$log"
while IFS= read -r line; do
	case $line in
	"not ok "*) fail=$((fail + 1)); failed+=("${line#not ok }") ;;
	"ok "*"# skip"*) skip=$((skip + 1)) ;;
	"ok "*) pass=$((pass + 1)) ;;
	esac
done < "$log"

echo
for f in "${failed[@]+"${failed[@]}"}"; do echo "FAILED: $f"; done
if [ "$skip" -gt 0 ]; then
	echo "$pass passed, $fail failed, $skip skipped"
else
	echo "$pass passed, $fail failed"
fi
[ "$fail" -eq 0 ] && [ $((pass + skip)) -gt 0 ]

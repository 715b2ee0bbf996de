#!/usr/bin/env bash
# Run the C unit tests, every bats suite and the pytest suite of the
# Python package against the build in $BUILD (default build/), then print
# "N passed, N failed[, N skipped]".  Unit tests exit 0 (pass), 77 (skip)
# or anything else (fail); pytest runs under Debian's /usr/bin/python3
# ($KV_PYTHON), which has python3-numpy and python3-pytest.
# Usage: tests/run.sh [SUITE.bats ... | tests/python ...]
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
	set -- tests/bats/*.bats tests/python
fi

bats_suites=() py_suites=()
for a in "$@"; do
	case $a in *.bats) bats_suites+=("$a") ;; *) py_suites+=("$a") ;; esac
done

log=$(mktemp)
trap 'rm -f "$log"' EXIT
[ ${#bats_suites[@]} -eq 0 ] || bats --tap --timing "${bats_suites[@]}" | tee "$log"
if [ ${#py_suites[@]} -gt 0 ]; then
	py=${KV_PYTHON:-/usr/bin/python3}
	preload=
	# A sanitized libkv.so loads into Python only after its runtimes.
	if [ -n "${KV_SANITIZED:-}" ]; then
		preload="$(${CC:-cc} -print-file-name=libasan.so) $(${CC:-cc} -print-file-name=libubsan.so)"
	fi
	# pytest -v lines "FILE::TEST PASSED [ 4%]" become TAP lines here.
	LD_PRELOAD="${preload:+$preload }${LD_PRELOAD:-}" \
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
		"$py" -m pytest -v -rN -p no:cacheprovider "${py_suites[@]}" 2>&1 |
		sed -n -e 's/^\([^ ]*::[^ ]*\) PASSED.*/ok python: \1/p' \
		       -e 's/^\([^ ]*::[^ ]*\) SKIPPED.*/ok python: \1 # skip/p' \
		       -e 's/^\([^ ]*::[^ ]*\) \(FAILED\|ERROR\).*/not ok python: \1/p' \
		       -e 's/^_* ERROR collecting \([^ ]*\) _*$/not ok python: \1 (collecting)/p' \
		       -e 's/^.*No module named pytest.*/not ok python: pytest missing (scripts\/deps.sh)/p' |
		tee -a "$log"
fi
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

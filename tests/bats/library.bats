#!/usr/bin/env bats
# libkv's own promises: an explicit symbol map that matches its public
# headers, and every exported function documented in libkv(3).

load test_helper

top=$BATS_TEST_DIRNAME/../..

# Functions the public headers declare: prototypes start in column 0.
declared() {
	grep -hoE '^[a-z][a-z0-9_ *]*\bkv_[a-z0-9_]+\(' "$top"/lib/include/kv/*.h |
		grep -v '^typedef' | grep -oE 'kv_[a-z0-9_]+\($' | tr -d '(' | sort -u
}

@test "libkv.map names every public function, one by one, and no other" {
	grep -q 'kv_\*' "$top/lib/libkv.map" && fail "libkv.map exports by wildcard"
	mapped=$(grep -oE '^[[:space:]]+kv_[a-z0-9_]+;' "$top/lib/libkv.map" | tr -d ' \t;' | sort -u)
	diff <(declared) <(echo "$mapped") || fail "headers (<) and libkv.map (>) disagree"
}

@test "libkv.so exports exactly what libkv.map names" {
	so=$KV_BIN/../libkv.so
	[ -f "$so" ] || skip "no $so"
	exported=$(nm -D --defined-only "$so" | awk '$3 !~ /^KV_/ {print $3}' | sed 's/@.*//' | sort -u)
	diff <(declared) <(echo "$exported")
}

@test "libkv(3) documents every exported function" {
	missing=
	for f in $(declared); do
		grep -qE "^\.(It )?(Fn|Fo) $f( |\$)" "$top/man/libkv.3" || missing="$missing $f"
	done
	[ -z "$missing" ] || fail "not in libkv.3:$missing"
}

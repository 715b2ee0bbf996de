#!/usr/bin/env bats
# A staged install (make install DESTDIR=... PREFIX=/usr) is usable: the
# binaries run from it, man pages render, completions load, and a C and a
# C++ program build against libkv through pkg-config.  Uninstall removes
# what install put there.

load test_helper
load overlay_root

top=$BATS_TEST_DIRNAME/../..

setup_file() {
	export STAGE=$BATS_FILE_TMPDIR/stage
	make -C "$top" -s BUILD="${BUILD:-build}" install DESTDIR="$STAGE" PREFIX=/usr >/dev/null
}

@test "installed binaries run and report the version" {
	for b in "$STAGE"/usr/bin/*; do
		run "$b" --version
		[ "$status" -eq 0 ] || fail "$b --version: $output"
		[[ "$output" == "${b##*/} (kvtools) "* ]] || fail "$b: $output"
	done
	[ -x "$STAGE/usr/bin/kvls" ]
}

@test "installed man pages render with man -l" {
	requires man
	n=0
	for m in "$STAGE"/usr/share/man/man*/*; do
		run env MANWIDTH=80 man -l "$m"
		[ "$status" -eq 0 ] || fail "man -l $m: $output"
		[[ "$output" == *NAME* ]] || fail "$m renders no NAME section"
		n=$((n + 1))
	done
	[ "$n" -ge 3 ]
}

@test "installed bash completions load" {
	for c in "$STAGE"/usr/share/bash-completion/completions/*; do
		run bash -c "source '$c' && complete -p '${c##*/}'"
		[ "$status" -eq 0 ] || fail "$c: $output"
	done
}

@test "installed zsh completions are found by compinit" {
	requires zsh
	run zsh -fc "fpath=('$STAGE/usr/share/zsh/vendor-completions' \$fpath); autoload -Uz compinit; compinit -u -D; print -l \${(k)_comps[kvls]}"
	[ "$status" -eq 0 ]
	[ "$output" = kvls ]
}

@test "zsh completions install into a dir on zsh's \$fpath, under /usr and /usr/local alike" {
	requires zsh
	local stage=$BATS_TEST_TMPDIR/local fpath f dir
	make -C "$top" -s BUILD="${BUILD:-build}" install DESTDIR="$stage" PREFIX=/usr/local >/dev/null
	fpath=$(zsh -c 'print -l $fpath')
	for f in $(find "$STAGE" "$stage" -name _kvls); do
		dir=${f%/_kvls}
		dir=${dir#"$STAGE"}
		dir=${dir#"$stage"}
		grep -qxF "$dir" <<<"$fpath" || fail "_kvls went to $dir, which zsh's \$fpath lacks"
	done
	[ -n "$(find "$stage" -name _kvls)" ] && [ -n "$(find "$STAGE" -name _kvls)" ]
}

@test "make install on this machine (an overlay of /): the libkv(3) example runs as built, apropos finds the pages" {
	requires cc pkg-config apropos
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	local d=$BATS_TEST_TMPDIR/o
	overlay_requires "$d"
	cat > "$BATS_TEST_TMPDIR/v.c" <<'C'
#include <stdio.h>
#include <kv/kv.h>
int main(void) { puts(kv_version()); return 0; }
C
	# As libkv(3) builds it: no rpath, no LD_LIBRARY_PATH.
	run in_overlay "$d" "cd '$top'
		make -s BUILD='${BUILD:-build}' install PREFIX=/usr/local >/dev/null
		cc -o '$BATS_TEST_TMPDIR/v' '$BATS_TEST_TMPDIR/v.c' \$(pkg-config --cflags --libs libkv)
		'$BATS_TEST_TMPDIR/v'
		apropos kvls"
	[ "$status" -eq 0 ] || fail "$output"
	assert_line "$(sed -n 's/^VERSION *:= *//p' "$top/Makefile")"
	assert_line --regexp '^kvls \(1\) +- '
}

@test "a C11 and a C++ program link libkv through pkg-config" {
	requires pkg-config cc c++
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	export PKG_CONFIG_SYSROOT_DIR=$STAGE
	export PKG_CONFIG_PATH=$STAGE/usr/lib/pkgconfig
	cat > "$BATS_TEST_TMPDIR/v.c" <<'C'
#include <stdio.h>
#include <kv/kv.h>
int main(void) { puts(kv_version()); return 0; }
C
	cp "$BATS_TEST_TMPDIR/v.c" "$BATS_TEST_TMPDIR/v.cc"
	run pkg-config --modversion libkv
	[ "$status" -eq 0 ]
	want=$output
	cc -std=c11 -Wall -Werror $(pkg-config --cflags libkv) "$BATS_TEST_TMPDIR/v.c" \
		-o "$BATS_TEST_TMPDIR/v" -L"$STAGE/usr/lib" -Wl,-rpath,"$STAGE/usr/lib" -lkv
	run "$BATS_TEST_TMPDIR/v"
	[ "$output" = "$want" ]
	c++ -Wall -Werror $(pkg-config --cflags libkv) "$BATS_TEST_TMPDIR/v.cc" \
		-o "$BATS_TEST_TMPDIR/vxx" -L"$STAGE/usr/lib" -Wl,-rpath,"$STAGE/usr/lib" -lkv
	run "$BATS_TEST_TMPDIR/vxx"
	[ "$output" = "$want" ]
}

@test "the shared library exports only kv_* symbols, versioned" {
	so=$(readlink -f "$STAGE/usr/lib/libkv.so")
	run bash -c "nm -D --defined-only '$so' | awk '{print \$3}' | grep -vE '^KV_0(\.[0-9]+)*$' | grep -v '^kv_'"
	[ -z "$output" ] || fail "non-kv symbols exported: $output"
	run bash -c "objdump -T '$so' | grep -c 'KV_0 *kv_version'"
	[ "$output" -ge 1 ]
}

@test "the installed Python package names the installed libkv.so and runs on it" {
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	pkg=$STAGE/usr/lib/python3/dist-packages
	run cat "$pkg/kvtools/_installed.py"
	[ "$output" = 'LIBKV = "/usr/lib/libkv.so.0"' ] || fail "$output"
	# Staged, so not at that path: point it at the staged copy instead.
	run env KVTOOLS_LIBKV="$STAGE/usr/lib/libkv.so.0" /usr/bin/python3 -c "
import sys; sys.path.insert(0, '$pkg')
import kvtools
try:
    kvtools.connect('$BATS_TEST_TMPDIR/no-daemon')
except kvtools.KvError as e:
    print(e.errno_name, kvtools.__file__, kvtools._exports.__file__)"
	[ "$status" -eq 0 ] || fail "$output"
	[ "$output" = "ENOENT $pkg/kvtools/__init__.py $pkg/kvtools/_exports.abi3.so" ] ||
		fail "$output"
}

# Debian's python3, which has numpy; the one first on PATH may be another.
py=${KV_PYTHON:-/usr/bin/python3}

@test "make install PREFIX=/usr/local puts the Python package where Debian's python3 looks" {
	[ -x "$py" ] || skip "no $py"
	local stage=$BATS_TEST_TMPDIR/local dir
	make -C "$top" -s BUILD="${BUILD:-build}" install DESTDIR="$stage" PREFIX=/usr/local \
		PYTHON="$py" >/dev/null
	dir=$(cd "$stage" && ls -d usr/local/lib/python3*/dist-packages/kvtools)
	dir=/${dir%/kvtools}
	run "$py" -c 'import sys; print("\n".join(sys.path))'
	printf '%s\n' "$output" | grep -qxF "$dir" ||
		fail "$dir is not on $py's sys.path: $output"
	[ "$(cat "$stage$dir/kvtools/_installed.py")" = 'LIBKV = "/usr/local/lib/libkv.so.0"' ]
}

@test "a package installed under a prefix imports with Debian's python3 and loads that prefix's libkv.so" {
	[ -x "$py" ] || skip "no $py"
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	local prefix=$BATS_TEST_TMPDIR/prefix pkg
	make -C "$top" -s BUILD="${BUILD:-build}" install PREFIX="$prefix" PYTHON="$py" >/dev/null
	pkg=$(ls -d "$prefix"/lib/python3*/dist-packages)
	run env -u KVTOOLS_LIBKV PYTHONPATH="$pkg" "$py" -c "
import kvtools, kvtools._lib as l
try:
    kvtools.connect('$BATS_TEST_TMPDIR/no-daemon')
except kvtools.KvError as e:
    print(e.errno_name, l.lib._name, kvtools.__file__)"
	[ "$status" -eq 0 ] || fail "$output"
	[ "$output" = "ENOENT $prefix/lib/libkv.so.0 $pkg/kvtools/__init__.py" ] || fail "$output"
	make -C "$top" -s BUILD="${BUILD:-build}" uninstall PREFIX="$prefix" PYTHON="$py" >/dev/null
	[ ! -e "$pkg/kvtools" ]
}

@test "pip installs python/ into a fresh venv offline, no setuptools or wheel needed, as an abi3 wheel at kvtools' version" {
	[ -x "$py" ] || skip "no $py"
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	"$py" -c 'import venv, ensurepip' 2>/dev/null ||
		skip "$py lacks venv or ensurepip (python3-venv)"
	local venv=$BATS_TEST_TMPDIR/venv src=$BATS_TEST_TMPDIR/src
	# A copy: pip builds in the source tree.
	cp -r "$top/python" "$src"
	rm -rf "$src/build" "$src"/*.egg-info
	# No system site-packages, build isolation on, no index: the
	# package's own backend needs nothing but the standard library.
	"$py" -m venv "$venv"
	! "$venv/bin/python" -c 'import wheel' 2>/dev/null || skip "this venv has wheel already"
	run "$venv/bin/pip" install --no-index "$src"
	[ "$status" -eq 0 ] || fail "$output"
	run "$venv/bin/pip" show kvtools
	assert_line "Version: $(sed -n 's/^VERSION *:= *//p' "$top/Makefile")"
	run "$venv/bin/pip" wheel --no-index -w "$BATS_TEST_TMPDIR/wheels" "$src"
	[ "$status" -eq 0 ] || fail "$output"
	ls "$BATS_TEST_TMPDIR/wheels"/kvtools-*-cp311-abi3-*.whl
	cd "$BATS_TEST_TMPDIR"
	run env KVTOOLS_LIBKV="$(readlink -f "$top/${BUILD:-build}/libkv.so")" "$venv/bin/python" -c "
import kvtools
try:
    kvtools.connect('$BATS_TEST_TMPDIR/no-daemon')
except kvtools.KvError as e:
    print(e.errno_name, kvtools.__file__, kvtools._exports.__file__)"
	[ "$status" -eq 0 ] || fail "$output"
	[[ "$output" == "ENOENT $venv/lib/python3"*"/site-packages/kvtools/__init__.py $venv/lib/python3"*"/site-packages/kvtools/_exports.abi3.so" ]] ||
		fail "$output"
}

@test "make uninstall removes everything install put there" {
	make -C "$top" -s BUILD="${BUILD:-build}" uninstall DESTDIR="$STAGE" PREFIX=/usr >/dev/null
	run find "$STAGE" -type f
	[ -z "$output" ] || fail "left behind: $output"
	run find "$STAGE" -type l
	[ -z "$output" ] || fail "left behind: $output"
}

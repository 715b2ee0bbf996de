#!/usr/bin/env bats
# The promises every program makes (DESIGN.md "Conventions"): --help and
# --version, usage errors, a man page and completions that agree with
# --help, and stdout write errors reported.

load test_helper

programs() {
	local d
	for d in "$BATS_TEST_DIRNAME"/../../cmd/*/; do
		d=${d%/}; d=${d##*/}
		echo "$d"
	done
}

top=$BATS_TEST_DIRNAME/../..

# Long options a --help text offers.
help_options() {
	"$1" --help | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u
}

@test "every program has -h/--help on stdout with exit 0" {
	for p in $(programs); do
		run "$p" --help
		[ "$status" -eq 0 ] || fail "$p --help exited $status"
		[[ "$output" == *Usage:* ]] || fail "$p --help has no Usage: line"
		run "$p" -h
		[ "$status" -eq 0 ] || fail "$p -h exited $status"
	done
}

@test "every program prints the same version" {
	want=$(sed -n 's/^VERSION *:= *//p' "$top/Makefile")
	for p in $(programs); do
		run "$p" --version
		[ "$status" -eq 0 ] || fail "$p --version exited $status"
		[ "$output" = "$p (kvtools) $want" ] || fail "$p --version: '$output'"
		run "$p" -V
		[ "$output" = "$p (kvtools) $want" ] || fail "$p -V: '$output'"
	done
}

@test "every --help's usage ends 'PROG -h | -V', as its man page's SYNOPSIS does" {
	local p page
	for p in $(programs); do
		"$p" --help | sed -n '1,/^$/p' | grep -qE "^ +$p -h \| -V$" ||
			fail "$p --help: no '$p -h | -V' usage line"
		page=$(ls "$top"/man/"$p".[1-8] | head -1)
		sed -n '/^\.Sh SYNOPSIS/,/^\.Sh/p' "$page" | grep -qx '\.Fl h | V' ||
			fail "${page##*/}: no '-h | -V' in SYNOPSIS"
	done
}

@test "-c is --config in every program that takes it, and no other option anywhere" {
	local p line
	for p in $(programs); do
		line=$("$p" --help | grep -E '^ +-c, ' || true)
		if [ -n "$line" ]; then
			[[ $line == *"-c, --config FILE"* ]] || fail "$p --help: $line"
			continue
		fi
		run --separate-stderr "$p" -c x
		[[ "${stderr%%$'\n'*}" == "$p: invalid option -- 'c'" ]] || fail "$p -c: $stderr"
		! grep -qE -- "(^|[ |'{(])-c([ |)'+,]|$)" "$top/completions/bash/$p" "$top/completions/zsh/_$p" ||
			fail "$p: a completion offers -c"
	done
}

@test "a missing root is said in one set of words by every program and mode, exit 3" {
	local nope=$BATS_TEST_TMPDIR/nope cmd want
	make_config > "$BATS_TEST_TMPDIR/config.json"
	while IFS= read -r cmd; do
		[ -n "$cmd" ] || continue
		run --separate-stderr bash -c "KV_ROOT='$nope' $cmd </dev/null"
		want="${cmd%% *}: cache root '$nope' does not exist: not mounted, or not made yet?"
		[ "$status" -eq 3 ] || fail "$cmd: exit $status: $stderr"
		[ "${stderr%%$'\n'*}" = "$want" ] || fail "$cmd: $stderr"
	done <<CMDS
kvls
kvls --blocks
kvls --check
kvevict --high 85 --low 70
kvevict --max-bytes 1G --dry-run
kvevict --stdin
kvput --config $BATS_TEST_TMPDIR/config.json abcde /dev/null
kvget --config $BATS_TEST_TMPDIR/config.json abcde
kvwatch
kvoffd --socket $BATS_TEST_TMPDIR/s.sock --cpu-bytes 64M
kvbench probe --root $nope
CMDS
}

@test "a count of one reads in the singular: '1 block', never '1 blocks'" {
	local hf=$BATS_TEST_DIRNAME/../fixtures/hf/llama-3.1-8b.json all=
	make_config > "$BATS_TEST_TMPDIR/config.json"
	random_file "$BATS_TEST_TMPDIR/b" 4096
	kvput --config "$BATS_TEST_TMPDIR/config.json" abcdef0123 "$BATS_TEST_TMPDIR/b"
	run kvls --verify
	assert_output --regexp '^0 problems; 1 block: '
	all+=$output
	run kvls --announce --events "tcp://127.0.0.1:1"
	assert_failure 3
	assert_output --partial "1 of 1 block was not delivered"
	all+=$output
	run kvbench run --dir "$BATS_TEST_TMPDIR/s" --threads 1 --qd 1 --block-size 64K --size 64K \
		--phases write
	assert_output --partial ", 1 thread x qd 1, "
	assert_output --partial ", 1 file of 64K"
	all+=$output
	run kvbench geometry --hf-config "$hf" --gpu-block-tokens 1 --tokens-per-file 1
	assert_output --partial "= 1 token = 1 GPU block"
	all+=$output
	echo '100 0.5' > "$BATS_TEST_TMPDIR/curve"
	run kvbench verdict --hf-config "$hf" --measured-prefill "$BATS_TEST_TMPDIR/curve" \
		--read-bandwidth 1G
	assert_output --partial "measured, 1 point from"
	all+=$output
	run kvevict --max-bytes 1 --low-bytes 0 --hot 0
	assert_output --regexp '^kvevict: deleted 1 block \('
	all+=$output
	! grep -oE '(^|[^0-9.])1 [a-z]+s\b' <<<"$all" | grep -vE ' (bytes|ms|ns|us)$' ||
		fail "a plural after 1: $all"
}

@test "-J: the README names every program that takes none, and only those" {
	local p no_j
	no_j=$(tr '\n' ' ' < "$top/README.md" | grep -oE '\([^()]*take no `-J`' || true)
	for p in $(programs); do
		if "$p" --help | grep -qE -- '^ +-J, --json '; then
			[[ $no_j != *"\`$p\`"* ]] || fail "README: $p takes no -J, but it does"
		else
			[[ $no_j == *"\`$p\`"* ]] || fail "$p takes no -J, which the README does not say"
		fi
	done
}

@test "a bad option exits 2 and points at --help" {
	for p in $(programs); do
		run --separate-stderr "$p" --no-such-option
		[ "$status" -eq 2 ] || fail "$p --no-such-option exited $status"
		[[ "$stderr" == *"Try '$p --help'"* ]] || fail "$p: no hint: $stderr"
		[ -z "$output" ] || fail "$p printed to stdout on a usage error"
	done
}

@test "option errors read the same in every program: getopt's words under the program's name" {
	local p
	for p in $(programs); do
		run --separate-stderr "$p" --no-such-option
		assert_equal "$status" 2
		[[ "${stderr%%$'\n'*}" == "$p: unrecognized option '--no-such-option'" ]] ||
			fail "$p --no-such-option: $stderr"
		run --separate-stderr "$p" -Z
		assert_equal "$status" 2
		[[ "${stderr%%$'\n'*}" == "$p: invalid option -- 'Z'" ]] || fail "$p -Z: $stderr"
		run --separate-stderr "$p" --root
		assert_equal "$status" 2
		[[ "${stderr%%$'\n'*}" == "$p: option '--root' requires an argument" ]] ||
			fail "$p --root: $stderr"
		run --separate-stderr "$p" --help=yes
		assert_equal "$status" 2
		[[ "${stderr%%$'\n'*}" == "$p: option '--help' doesn't allow an argument" ]] ||
			fail "$p --help=yes: $stderr"
	done
	run --separate-stderr kvput -r
	[[ "$stderr" == "kvput: option requires an argument -- 'r'"* ]] || fail "kvput -r: $stderr"
	run --separate-stderr kvbench dma --bogus
	[[ "$stderr" == "kvbench: unrecognized option '--bogus'"* ]] || fail "kvbench dma: $stderr"
}

@test "--rank is the worker's global rank (tp x pp x pcp) in every --help, page and completion" {
	local p bad
	for p in kvput kvget; do
		"$p" --help | grep -qE -- "--rank N +the worker's global rank" ||
			fail "$p --help: $("$p" --help | grep -- '--rank N')"
		grep -A1 '^\.It Fl -rank' "$top/man/$p.1" | grep -q "global rank" ||
			fail "$p.1 does not call --rank the global rank"
		grep -- "'--rank=" "$top/completions/zsh/_$p" | grep -q "global rank" ||
			fail "_$p: --rank described otherwise"
	done
	# kv(7) may say what it is not; nothing else may call it the
	# tensor-parallel rank.
	bad=$(grep -rnE 'tensor-parallel rank([^s]|$)' "$top"/cmd "$top"/man "$top"/completions \
		"$top"/README.md "$top"/python | grep -v 'tensor-parallel rank alone' || true)
	[ -z "$bad" ] || fail "--rank called the tensor-parallel rank: $bad"
}

@test "kvevict's refusal of a kvoffd tier has one exit code, the one kv(7), kvevict(8) and the README give" {
	# The behaviour itself: kvoffd_tiers.bats (exit 2 without --force).
	sed -n '/^\.Ss Exit status of the programs/,/^\.El/p' "$top/man/kv.7" |
		sed -n '/^\.It 2$/,/^\.It 3$/p' | grep -q 'kvoffd' ||
		fail "kv(7) does not say which code refusing a kvoffd tier exits with"
	sed -n '/^\.Sh EXIT STATUS/,/^\.Sh/p' "$top/man/kvevict.8" |
		sed -n '/^\.It 2$/,/^\.It 3$/p' | grep -q 'kvoffd' ||
		fail "kvevict(8) EXIT STATUS does not give the code of refusing a kvoffd tier"
	grep -A3 'Exit status: 0' "$top/README.md" | tr '\n' ' ' |
		grep -q '2 usage error (also work refused until `--force`[^)]*kvoffd' ||
		fail "README's exit status does not give the code of refusing a kvoffd tier"
}

@test "no --help says upstream readers stamp atime: neither vLLM's nor llm-d's does (kv(7))" {
	local p bad
	for p in $(programs); do
		bad=$("$p" --help | tr '\n' ' ' | tr -s ' ' |
			grep -oiE "atime,? as (vllm|llm-d)('s)? ([a-z]+ )?readers do" || true)
		[ -z "$bad" ] || fail "$p --help: '$bad'"
	done
}

@test "every program has a man page that mandoc lints clean" {
	requires mandoc
	for p in $(programs); do
		page=$(ls "$top"/man/"$p".[1-8] 2>/dev/null | head -1)
		[ -n "$page" ] || fail "$p has no man page"
		run mandoc -Tlint -Wwarning "$page"
		[ "$status" -eq 0 ] || fail "$page: $output"
	done
	for page in "$top"/man/kv.7 "$top"/man/libkv.3; do
		[ -f "$page" ] || fail "missing $page"
		run mandoc -Tlint -Wwarning "$page"
		[ "$status" -eq 0 ] || fail "$page: $output"
	done
}

# Every page as mandoc -Tutf8 renders it, for what lint does not see.
rendered() {
	mandoc -Tutf8 "$1" | col -bx
}

@test "man pages render without stray dashes, broken examples or ungrouped alternatives" {
	requires mandoc
	local page bad line text
	for page in "$top"/man/*.[1-8]; do
		# .Fl makes each word after it a flag: ".Fl -daemon, as a
		# duration" renders "--daemon, -as -a -duration".  Options here
		# are long or one letter; mpirun's -np and -errno are words.
		bad=$(rendered "$page" | grep -oE '(^|[][ (|])-[a-z][a-z0-9]+' |
			grep -vE -- '-(np|errno)$' || true)
		[ -z "$bad" ] || fail "${page##*/}: stray dashes from .Fl in running text:" $bad
		# A display run straight into the next paragraph's text.
		bad=$(rendered "$page" | awk '/^[A-Z]/ { sec = $0 }
			sec == "EXAMPLES" && prev ~ /^      +[^ ]/ && /^     [^ ]/ { print prev }
			{ prev = $0 }')
		[ -z "$bad" ] || fail "${page##*/}: no blank line after the example: $bad"
		# A one-line display (.Dl) too long for the page is wrapped
		# into a broken command; a .Bd -literal with \ continuations
		# is not.
		while IFS= read -r line; do
			text=${line#.Dl }
			[[ $text =~ \ (Ar|Ns|Fl|Cm|Li|Pa|Ic|Ql|Sy|Em)\  ]] && continue
			text=${text//\\e/\\}
			rendered "$page" | grep -qF -- "$text" ||
				fail "${page##*/}: wrapped .Dl example: $text"
		done < <(grep '^\.Dl ' "$page")
		# Alternatives between long options need their group,
		# "(--model-dir dir | --config file)", as --help shows it; a
		# mode's right after the name ("kvls --check | --verify")
		# reads as one already.
		bad=$(rendered "$page" | awk '/^[A-Z]/ { sec = $0; next }
			sec == "SYNOPSIS" {
				depth = 0
				for (i = 1; i <= NF; i++) {
					n = gsub(/[[(]/, "&", $i); m = gsub(/[])]/, "&", $i)
					if ($i == "|" && !depth && $(i + 1) ~ /^--/ && i > 3)
						print
					depth += n - m
				}
			}')
		[ -z "$bad" ] || fail "${page##*/}: ungrouped alternatives in SYNOPSIS: $bad"
	done
}

@test "--help, man page and completions name the same long options" {
	for p in $(programs); do
		page=$(ls "$top"/man/"$p".[1-8] | head -1)
		bash_c=$top/completions/bash/$p
		zsh_c=$top/completions/zsh/_$p
		[ -f "$bash_c" ] || fail "$p has no bash completion"
		[ -f "$zsh_c" ] || fail "$p has no zsh completion"
		# Once per program: each --help is a start (slow under ASan).
		opts=$(help_options "$p")
		for o in $opts; do
			grep -qF -- "$o" "$bash_c" || fail "$p: $o missing from $bash_c"
			grep -qF -- "$o" "$zsh_c" || fail "$p: $o missing from $zsh_c"
			# mdoc spells --opt as "Fl \-opt" or "Fl -opt".
			grep -qE -- "Fl \\\\?-${o#--}( |$)" "$page" || fail "$p: $o missing from $page"
		done
		for o in $(grep -oE 'Fl \\?-[a-z][a-z0-9-]+' "$page" | sed 's/Fl \\\?-/--/' | sort -u); do
			grep -qxF -- "$o" <<<"$opts" || fail "$p: $page documents $o but --help does not"
		done
	done
}

@test "bash completions load and complete long options" {
	requires bash
	for p in $(programs); do
		run bash -c "
			source /usr/share/bash-completion/bash_completion 2>/dev/null || true
			source '$top/completions/bash/$p'
			COMP_WORDS=($p --); COMP_CWORD=1; COMP_LINE='$p --'; COMP_POINT=\${#COMP_LINE}
			f=\$(complete -p $p | sed -n 's/.*-F \\([^ ]*\\).*/\\1/p')
			\$f $p -- $p
			printf '%s\n' \"\${COMPREPLY[@]}\""
		[ "$status" -eq 0 ] || fail "$p bash completion failed: $output"
		[[ "$output" == *--help* ]] || fail "$p: completion does not offer --help: $output"
	done
}

@test "zsh completions parse" {
	requires zsh
	for p in $(programs); do
		run zsh -n "$top/completions/zsh/_$p"
		[ "$status" -eq 0 ] || fail "_$p: $output"
	done
}

@test "a write error on stdout is reported, not swallowed" {
	[ -w /dev/full ] || skip "no /dev/full"
	for p in $(programs); do
		run --separate-stderr "$p" --help
		run --separate-stderr bash -c "'$p' --help > /dev/full"
		[ "$status" -ne 0 ] || fail "$p --help > /dev/full exited 0"
		[[ "$stderr" == *"write error"* ]] || fail "$p: no message: $stderr"
	done
}

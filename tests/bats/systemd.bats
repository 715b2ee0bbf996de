#!/usr/bin/env bats
# contrib/systemd as `make install` puts it: the units verify, everything
# they name exists on a fresh machine once kvtools-setup.service has run
# (users, groups, the dirs kvoffd writes), kvoffd's unit lets it publish
# KV events over TCP as contrib/llm-d tells users to, and where systemd
# is the init, the units start.

load test_helper

top=$BATS_TEST_DIRNAME/../..

setup_file() {
	export STAGE=$BATS_FILE_TMPDIR/stage
	make -C "$top" -s BUILD="${BUILD:-build}" install DESTDIR="$STAGE" PREFIX=/usr >/dev/null
	export UNITS=$STAGE/usr/lib/systemd/system
}

# unit_values UNIT KEY: every value of KEY= in UNIT, one per line.
unit_values() {
	sed -n "s/^$2=//p" "$UNITS/$1"
}

# A fresh machine's root with only the package's files: the setup unit's
# sysusers.d and tmpfiles.d applied to it as to /.
fresh_root() {
	local root=$BATS_TEST_TMPDIR/root
	mkdir -p "$root/etc"
	cp -r "$STAGE/usr" "$root/"
	systemd-sysusers --root="$root" "$root/usr/lib/sysusers.d/kvtools.conf" >/dev/null 2>&1
	systemd-tmpfiles --root="$root" --create "$root/usr/lib/tmpfiles.d/kvtools.conf" >/dev/null 2>&1
	echo "$root"
}

@test "systemd-analyze verify passes every unit (run from the build)" {
	requires systemd-analyze
	local d=$BATS_TEST_TMPDIR/units u
	mkdir -p "$d"
	for u in "$UNITS"/*; do
		sed "s|/usr/bin/kv|$KV_BIN/kv|g" "$u" > "$d/${u##*/}"
	done
	run systemd-analyze verify --man=no "$d"/*.service "$d"/*.timer
	[ "$status" -eq 0 ] || fail "$output"
}

@test "every User= and Group= of the units exists on a fresh machine once the setup unit ran" {
	requires systemd-sysusers systemd-tmpfiles
	local root u name
	root=$(fresh_root)
	for u in "$UNITS"/*.service; do
		u=${u##*/}
		[ "$(unit_values "$u" DynamicUser)" = yes ] && continue
		for name in $(unit_values "$u" User); do
			grep -q "^$name:" "$root/etc/passwd" || fail "$u: User=$name is made by nothing"
			unit_values "$u" Requires | grep -qw kvtools-setup.service ||
				fail "$u: User=$name, but it does not require kvtools-setup.service"
		done
		for name in $(unit_values "$u" Group); do
			grep -q "^$name:" "$root/etc/group" || fail "$u: Group=$name is made by nothing"
		done
	done
	# The setup unit applies exactly the files that install put there.
	unit_values kvtools-setup.service ExecStart | grep -qx \
		'/usr/bin/systemd-sysusers /usr/lib/sysusers.d/kvtools.conf'
	unit_values kvtools-setup.service ExecStart | grep -qx \
		'/usr/bin/systemd-tmpfiles --create /usr/lib/tmpfiles.d/kvtools.conf'
}

@test "every dir kvoffd's unit writes exists on a fresh machine: root, metrics, socket" {
	requires systemd-sysusers systemd-tmpfiles
	local root dir made=
	root=$(fresh_root)
	# What systemd itself makes for the unit.
	for dir in $(unit_values kvoffd.service StateDirectory); do made="$made /var/lib/$dir"; done
	for dir in $(unit_values kvoffd.service RuntimeDirectory); do made="$made /run/$dir"; done
	for dir in $(unit_values kvoffd.service CacheDirectory); do made="$made /var/cache/$dir"; done
	for dir in $(unit_values kvoffd.service Environment | sed -n 's/^KV_ROOT=//p') \
		   $(unit_values kvoffd.service ReadWritePaths) \
		   $(sed -n 's/.*--metrics-file \([^ ]*\).*/\1/p' "$UNITS/kvoffd.service" | xargs -n1 dirname) \
		   $(sed -n 's/.*--socket \([^ ]*\).*/\1/p' "$UNITS/kvoffd.service" | xargs -n1 dirname); do
		[[ " $made " == *" $dir "* ]] && continue
		[ -d "$root$dir" ] || fail "kvoffd.service needs $dir, which nothing makes"
	done
	# kvoffd writes its file tier as its own user, in the group of its clients.
	[ "$(stat -c %a "$root/var/cache/kv")" = 2775 ]
}

@test "kvoffd's unit lets it publish KV events over TCP, as contrib/llm-d tells users to" {
	grep -q 'kvoffd.*--events tcp://' "$top/contrib/llm-d/README.md" ||
		skip "contrib/llm-d no longer publishes kvoffd's events over TCP"
	[ "$(unit_values kvoffd.service PrivateNetwork)" != yes ] ||
		fail "PrivateNetwork=yes: no TCP at all"
	local families
	families=$(unit_values kvoffd.service RestrictAddressFamilies)
	[ -z "$families" ] || [[ " $families " == *" AF_INET "* && " $families " == *" AF_INET6 "* ]] ||
		fail "RestrictAddressFamilies=$families: no TCP"
}

@test "where systemd runs: kvtools-setup and kvoffd start, serve, and stop cleanly" {
	requires root systemctl
	[ "$(ps -p 1 -o comm=)" = systemd ] || skip "systemd is not the init here"
	local u
	for u in kvoffd.service kvtools-setup.service; do
		[ ! -e "/etc/systemd/system/$u" ] || skip "/etc/systemd/system/$u exists: not ours to replace"
	done
	mkdir -p /run/systemd/system
	for u in "$UNITS"/kvoffd.service "$UNITS"/kvtools-setup.service; do
		sed "s|/usr/bin/kv|$KV_BIN/kv|g; s|/usr/lib/sysusers.d/|$STAGE/usr/lib/sysusers.d/|; s|/usr/lib/tmpfiles.d/|$STAGE/usr/lib/tmpfiles.d/|; s|KVOFFD_CPU_BYTES=16G|KVOFFD_CPU_BYTES=64M|" \
			"$u" > "/run/systemd/system/${u##*/}"
	done
	systemctl daemon-reload
	run systemctl start kvoffd.service
	local started=$status
	run kvoffd --stats /run/kvoffd/kvoffd.sock
	local stats=$status
	systemctl stop kvoffd.service kvtools-setup.service || true
	rm -f /run/systemd/system/kvoffd.service /run/systemd/system/kvtools-setup.service
	systemctl daemon-reload
	[ "$started" -eq 0 ] || fail "systemctl start kvoffd: $(journalctl -u kvoffd -n 20 --no-pager)"
	[ "$stats" -eq 0 ]
}

#!/usr/bin/env bats
# contrib/systemd as `make install` puts it: the units verify, everything
# they name exists on a fresh machine once kvtools-setup.service has run
# (users, groups, the dirs kvoffd writes), kvoffd's unit lets it publish
# KV events over TCP as contrib/llm-d tells users to, and where systemd
# is the init, the units start; in a container booted on an overlay of
# this machine, kvoffd and kvwatch start together without one taking
# the other's dirs.

load test_helper
load overlay_root

top=$BATS_TEST_DIRNAME/../..

setup_file() {
	export STAGE=$BATS_FILE_TMPDIR/stage
	make -C "$top" -s BUILD="${BUILD:-build}" install DESTDIR="$STAGE" PREFIX=/usr >/dev/null
	export UNITS=$STAGE/usr/lib/systemd/system
}

teardown() {
	boot_stop
	common_teardown
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

@test "each unit's state, cache and runtime dirs are its own: systemd gives them to the unit's user" {
	# CacheDirectory=kv in a unit without User= chowns the cache root
	# that tmpfiles.d made kvoffd's to root, recursively, at each start.
	local u name key dir
	for u in "$UNITS"/*.service; do
		u=${u##*/}
		name=${u%.service}
		for key in StateDirectory CacheDirectory RuntimeDirectory LogsDirectory \
			   ConfigurationDirectory; do
			for dir in $(unit_values "$u" "$key"); do
				[ "${dir%%/*}" = "$name" ] ||
					fail "$u: $key=$dir, a dir it does not own (systemd would chown it)"
			done
		done
	done
}

@test "every unit on the cache root starts after kvtools-setup, which makes it" {
	local u
	for u in "$UNITS"/*.service; do
		u=${u##*/}
		[ "$u" != kvtools-setup.service ] || continue
		grep -q '/var/cache/kv' "$UNITS/$u" || continue
		unit_values "$u" After | grep -qw kvtools-setup.service ||
			fail "$u uses /var/cache/kv but is not ordered after kvtools-setup.service"
		{ unit_values "$u" Wants; unit_values "$u" Requires; } |
			grep -qw kvtools-setup.service ||
			fail "$u uses /var/cache/kv but does not pull in kvtools-setup.service"
	done
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

@test "booted with the units installed, kvoffd and kvwatch start together and the cache root stays kvoffd's" {
	local d=$BATS_TEST_TMPDIR/c
	overlay_requires "$d"
	requires nsenter findmnt setpriv
	# The staged install on /, with a small pool; node_exporter's
	# textfile dir as its package makes it.
	cp -a "$STAGE/usr" "$d/up/"
	sed -i 's/KVOFFD_CPU_BYTES=16G/KVOFFD_CPU_BYTES=64M/' "$d/up/usr/lib/systemd/system/kvoffd.service"
	mkdir -p "$d/up/var/lib/prometheus/node-exporter"
	chown nobody:nogroup "$d/up/var/lib/prometheus/node-exporter"
	chmod 0775 "$d/up/var/lib/prometheus/node-exporter"
	overlay_boot "$d"
	run in_boot systemctl start kvoffd.service kvwatch.service
	[ "$status" -eq 0 ] ||
		fail "systemctl start: $output $(in_boot journalctl -u kvoffd -u kvwatch -n 30 --no-pager)"
	run in_boot systemctl is-active kvoffd.service kvwatch.service
	[ "$output" = $'active\nactive' ] ||
		fail "$output $(in_boot journalctl -u kvoffd -u kvwatch -n 30 --no-pager)"
	run in_boot stat -c '%a %U:%G' /var/cache/kv
	[ "$output" = "2775 kvoffd:kvcache" ] || fail "after both started, /var/cache/kv is $output"
	# kvoffd writes its file tier; kvwatch starting again takes none of it.
	in_boot setpriv --reuid=kvoffd --regid=kvcache --init-groups touch /var/cache/kv/probe
	in_boot systemctl restart kvwatch.service
	run in_boot stat -c '%a %U:%G' /var/cache/kv /var/cache/kv/probe
	[ "$output" = $'2775 kvoffd:kvcache\n644 kvoffd:kvcache' ] ||
		fail "after kvwatch restarted: $output"
	# kvoffd still writes there, and serves its clients (the kvcache group).
	in_boot setpriv --reuid=kvoffd --regid=kvcache --init-groups touch /var/cache/kv/probe2
	in_boot setpriv --reuid=nobody --regid=kvcache --clear-groups \
		kvoffd --stats /run/kvoffd/kvoffd.sock >/dev/null
	run in_boot stat -c '%a %U:%G' /var/lib/prometheus/node-exporter
	[ "$output" = "775 nobody:nogroup" ] || fail "node_exporter's dir became $output"
	run in_boot systemctl is-active kvwatch.service
	[ "$output" = active ]
	in_boot systemctl stop kvwatch.service kvoffd.service
}

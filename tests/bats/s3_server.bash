# A real S3 server for a bats file: Ceph's RADOS Gateway started by
# tests/s3/s3server.sh, one per file (it takes 12 s to start).  Load
# after test_helper:
#
#   load test_helper
#   load s3_server
#   setup_file() { s3_setup_file; }
#   teardown_file() { s3_teardown_file; }
#   setup() { common_setup; s3_requires; }
#   teardown() { s3_proxy_stop; common_teardown; }
#
# s3_setup_file exports AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, AWS_REGION (and AWS_DEFAULT_REGION,
# S3SERVER_DIR, S3SERVER_PORT; see s3server.sh) or, where the server
# cannot start, S3_SKIP with the reason for s3_requires to skip with.

: "${S3_TOOLS:=$BATS_TEST_DIRNAME/../s3}"
S3_PYTHON=/usr/bin/python3

# s3_setup_file: start the server in $BATS_FILE_TMPDIR/s3 and export its
# endpoint and keys; exit 77 from s3server.sh becomes S3_SKIP.
s3_setup_file() {
	export S3_SKIP='' S3_DIR=$BATS_FILE_TMPDIR/s3
	local err=$BATS_FILE_TMPDIR/s3server.err rc=0
	"$S3_TOOLS/s3server.sh" start "$S3_DIR" 2>"$err" </dev/null >/dev/null 3>&- || rc=$?
	if [ "$rc" -eq 77 ]; then
		S3_SKIP=$(tail -n 1 "$err")
		: "${S3_SKIP:=s3server.sh cannot start a server}"
		return 0
	elif [ "$rc" -ne 0 ]; then
		cat "$err" >&2
		return "$rc"
	fi
	export S3_START_TIME
	S3_START_TIME=$(cat "$S3_DIR/log/start-time")
	# shellcheck disable=SC1091
	. "$S3_DIR/env"
}

# s3_teardown_file: stop the server and remove its directory.
s3_teardown_file() {
	[ -n "${S3_DIR:-}" ] || return 0
	"$S3_TOOLS/s3server.sh" stop "$S3_DIR"
}

# s3_requires [aws|boto3|jq|curl...]: skip with the reason when the server
# did not start, or when a client is missing.
s3_requires() {
	[ -z "${S3_SKIP:-}" ] || skip "$S3_SKIP"
	[ -n "${AWS_ENDPOINT_URL:-}" ] || skip "no S3 server (s3_setup_file not called)"
	local what
	for what in "$@"; do
		case $what in
		boto3) "$S3_PYTHON" -c 'import boto3' 2>/dev/null ||
			skip "needs python3-boto3" ;;
		*) command -v "$what" >/dev/null || skip "needs $what" ;;
		esac
	done
}

# s3_aws ARGS...: the aws CLI on the server (or on $S3_ENDPOINT when set,
# e.g. the fault proxy's URL).
s3_aws() {
	aws --endpoint-url "${S3_ENDPOINT:-$AWS_ENDPOINT_URL}" "$@"
}

# s3_mkbucket NAME: create a bucket (names take 3 to 63 characters).
s3_mkbucket() {
	aws --endpoint-url "$AWS_ENDPOINT_URL" s3api create-bucket --bucket "$1" >/dev/null
}

# s3_fill ARGS...: tests/s3/fill.py (--bucket, --prefix, --models,
# --ranks, --blocks, --size, --hex-len, --single-slash, --seed,
# --threads, --print, --emit-body KEY).
s3_fill() {
	"$S3_PYTHON" "$S3_TOOLS/fill.py" "$@"
}

# s3_proxy_start ARGS...: tests/s3/faultproxy.py in front of the server
# with ARGS (--slowdown N, --error500 N, --reset N, --every K,
# --delay-ms D, --control FILE); exports S3_PROXY_URL, S3_PROXY_PID,
# S3_PROXY_STATS (JSON counts) and S3_PROXY_LOG (a line per request).
s3_proxy_start() {
	local pf=$BATS_TEST_TMPDIR/proxy.port
	export S3_PROXY_STATS=$BATS_TEST_TMPDIR/proxy.stats
	export S3_PROXY_LOG=$BATS_TEST_TMPDIR/proxy.log
	rm -f "$pf"
	"$S3_PYTHON" "$S3_TOOLS/faultproxy.py" --upstream "$AWS_ENDPOINT_URL" \
		--port-file "$pf" --stats "$S3_PROXY_STATS" --log "$S3_PROXY_LOG" "$@" \
		</dev/null >"$BATS_TEST_TMPDIR/proxy.out" 2>&1 3>&- &
	export S3_PROXY_PID=$!
	for _ in $(seq 100); do
		[ -s "$pf" ] && break
		kill -0 "$S3_PROXY_PID" 2>/dev/null || break
		sleep 0.1
	done
	[ -s "$pf" ] || { cat "$BATS_TEST_TMPDIR/proxy.out" >&2; return 1; }
	S3_PROXY_URL=http://127.0.0.1:$(cat "$pf")
	export S3_PROXY_URL
}

# s3_proxy_stat NAME: one count from the proxy's stats (requests,
# forwarded, slowdown, error500, reset, delayed, upstream_errors).
s3_proxy_stat() {
	"$S3_PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
		"$S3_PROXY_STATS" "$1"
}

# s3_proxy_stop: for teardown; stops a proxy s3_proxy_start left running.
s3_proxy_stop() {
	[ -n "${S3_PROXY_PID:-}" ] || return 0
	kill "$S3_PROXY_PID" 2>/dev/null || true
	wait "$S3_PROXY_PID" 2>/dev/null || true
	S3_PROXY_PID=
}

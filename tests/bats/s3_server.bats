#!/usr/bin/env bats
# The S3 test harness itself: Ceph's RADOS Gateway from
# tests/s3/s3server.sh, buckets filled by tests/s3/fill.py as vLLM's obj
# tier fills them, and the faults of tests/s3/faultproxy.py, checked
# with the aws CLI, boto3 and curl.  Skips with the reason where the
# server cannot start.

load test_helper
load s3_server

setup_file() { s3_setup_file; }
teardown_file() { s3_teardown_file; }

setup() {
	common_setup
	BUCKET=b$BATS_TEST_NUMBER-$$
}

teardown() {
	s3_proxy_stop
	common_teardown
}

# list_keys BUCKET [PREFIX]: "KEY SIZE" per object, sorted, from the
# aws CLI (it pages through ListObjectsV2 and decodes encoding-type=url).
list_keys() {
	s3_aws s3api list-objects-v2 --bucket "$1" ${2:+--prefix "$2"} --output json |
		jq -r '.Contents[]? | "\(.Key) \(.Size)"' | LC_ALL=C sort
}

@test "s3server.sh: exits 77 with one line saying why where a package is missing" {
	run -77 env PATH=/nonexistent /bin/bash "$S3_TOOLS/s3server.sh" start "$BATS_TEST_TMPDIR/s"
	assert_output "s3server.sh: needs ceph (radosgw ceph-mon ceph-osd curl)"
}

@test "s3server.sh: the gateway answers, DIR/env holds the endpoint and keys" {
	s3_requires curl
	echo "# $S3_START_TIME" >&3
	[[ $AWS_ENDPOINT_URL =~ ^http://127\.0\.0\.1:[0-9]+$ ]]
	[ -n "$AWS_ACCESS_KEY_ID" ] && [ -n "$AWS_SECRET_ACCESS_KEY" ]
	[ "$AWS_REGION" = us-east-1 ]
	run curl -s -o /dev/null -w '%{http_code}' "$AWS_ENDPOINT_URL/"
	assert_output 200
	local name
	for name in mon.a osd.0 client.rgw.a; do
		kill -0 "$(cat "$S3SERVER_DIR/run/$name.pid")"
	done
	# a second start on the same directory is refused
	run -1 "$S3_TOOLS/s3server.sh" start "$S3SERVER_DIR"
	assert_output --partial "already holds a server"
}

@test "fill.py: keys list back byte for byte, '//' after a prefix and a leading '/' without" {
	s3_requires aws jq boto3
	s3_mkbucket "$BUCKET"
	s3_fill --bucket "$BUCKET" --prefix fleet --models 2 --ranks 2 --blocks 3 \
		--size 1000 --print >"$BATS_TEST_TMPDIR/want"
	s3_fill --bucket "$BUCKET" --models meta-llama/Llama-3.1-8B --blocks 2 \
		--size 10 --hex-len 64 --print >>"$BATS_TEST_TMPDIR/want"
	s3_fill --bucket "$BUCKET" --prefix one --blocks 2 --hex-len 32 \
		--single-slash --size 1 --print >>"$BATS_TEST_TMPDIR/want"
	[ "$(wc -l <"$BATS_TEST_TMPDIR/want")" -eq 16 ]
	grep -q '^fleet//kvtest_model-0_[0-9a-f]\{12\}_r1/[0-9a-f]\{3\}/[0-9a-f]\{2\}_g0/[0-9a-f]\{16\}\.bin 1000$' \
		"$BATS_TEST_TMPDIR/want"
	grep -q '^/meta-llama_Llama-3\.1-8B_[0-9a-f]\{12\}_r0/[0-9a-f]\{3\}/[0-9a-f]\{2\}_g0/[0-9a-f]\{64\}\.bin 10$' \
		"$BATS_TEST_TMPDIR/want"
	grep -q '^one/kvtest_model-0_[0-9a-f]\{12\}_r0/[0-9a-f]\{3\}/[0-9a-f]\{2\}_g0/[0-9a-f]\{32\}\.bin 1$' \
		"$BATS_TEST_TMPDIR/want"
	# the directory names are the hash's first 3 and next 2 digits
	while read -r key _; do
		local h=${key##*/}
		h=${h%.bin}
		[[ $key == */${h:0:3}/${h:3:2}_g0/$h.bin ]]
	done <"$BATS_TEST_TMPDIR/want"
	LC_ALL=C sort "$BATS_TEST_TMPDIR/want" >"$BATS_TEST_TMPDIR/want.sorted"
	list_keys "$BUCKET" >"$BATS_TEST_TMPDIR/got"
	diff "$BATS_TEST_TMPDIR/want.sorted" "$BATS_TEST_TMPDIR/got"
	# a prefix with '//' selects exactly the obj tier's keys under it
	run list_keys "$BUCKET" "fleet//"
	[ "${#lines[@]}" -eq 12 ]
	run list_keys "$BUCKET" /
	[ "${#lines[@]}" -eq 2 ]
	# and boto3 sees the same keys
	"$S3_PYTHON" - "$BUCKET" >"$BATS_TEST_TMPDIR/got.boto3" <<'PY'
import os, sys, boto3
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[1], PaginationConfig={"PageSize": 5}):
    for o in page.get("Contents", []):
        print(o["Key"], o["Size"])
PY
	LC_ALL=C sort "$BATS_TEST_TMPDIR/got.boto3" | diff "$BATS_TEST_TMPDIR/want.sorted" -
}

@test "fill.py: bodies are the seed's bytes; a ranged GET returns the range" {
	s3_requires aws boto3
	s3_mkbucket "$BUCKET"
	s3_fill --bucket "$BUCKET" --prefix p --blocks 1 --size 70000 --seed 7 --print \
		>"$BATS_TEST_TMPDIR/keys"
	local key
	read -r key _ <"$BATS_TEST_TMPDIR/keys"
	s3_fill --emit-body "$key" --size 70000 --seed 7 >"$BATS_TEST_TMPDIR/want"
	s3_aws s3api get-object --bucket "$BUCKET" --key "$key" "$BATS_TEST_TMPDIR/whole" >/dev/null
	cmp "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/whole"
	run s3_aws s3api get-object --bucket "$BUCKET" --key "$key" \
		--range bytes=65536-65635 "$BATS_TEST_TMPDIR/part"
	assert_success
	assert_output --partial '"ContentRange": "bytes 65536-65635/70000"'
	tail -c +65537 "$BATS_TEST_TMPDIR/want" | head -c 100 | cmp - "$BATS_TEST_TMPDIR/part"
	# a different seed gives different bytes
	s3_fill --emit-body "$key" --size 70000 --seed 8 >"$BATS_TEST_TMPDIR/other"
	run -1 cmp -s "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/other"
}

@test "DeleteObjects removes keys with '//' and a leading '/', and only those" {
	s3_requires aws jq boto3
	s3_mkbucket "$BUCKET"
	s3_fill --bucket "$BUCKET" --prefix fleet --blocks 3 --size 10 --print >"$BATS_TEST_TMPDIR/a"
	s3_fill --bucket "$BUCKET" --blocks 3 --size 10 --print >"$BATS_TEST_TMPDIR/b"
	local del
	del=$(head -n 2 "$BATS_TEST_TMPDIR/a"; head -n 1 "$BATS_TEST_TMPDIR/b")
	run s3_aws s3api delete-objects --bucket "$BUCKET" --output json --delete "$(
		cut -d' ' -f1 <<<"$del" | jq -R '{Key: .}' | jq -s '{Objects: ., Quiet: false}')"
	assert_success
	[ "$(jq '.Deleted | length' <<<"$output")" -eq 3 ]
	[ "$(jq '.Errors // [] | length' <<<"$output")" -eq 0 ]
	list_keys "$BUCKET" >"$BATS_TEST_TMPDIR/got"
	cat "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b" | grep -vxF "$del" | LC_ALL=C sort |
		diff - "$BATS_TEST_TMPDIR/got"
	[ "$(wc -l <"$BATS_TEST_TMPDIR/got")" -eq 3 ]
}

@test "faultproxy.py: forwards '//' paths and the client's Host as sent; SigV4 still matches" {
	s3_requires aws jq boto3
	s3_mkbucket "$BUCKET"
	s3_proxy_start
	S3_ENDPOINT=$S3_PROXY_URL
	head -c 3000000 /dev/urandom >"$BATS_TEST_TMPDIR/big"
	# a multi-megabyte body: boto3 sends Expect: 100-continue
	s3_aws s3api put-object --bucket "$BUCKET" --key "fleet//m_0123456789ab_r0/abc/de_g0/x.bin" \
		--body "$BATS_TEST_TMPDIR/big" >/dev/null
	s3_aws s3api get-object --bucket "$BUCKET" --key "fleet//m_0123456789ab_r0/abc/de_g0/x.bin" \
		"$BATS_TEST_TMPDIR/back" >/dev/null
	cmp "$BATS_TEST_TMPDIR/big" "$BATS_TEST_TMPDIR/back"
	grep -q "^1 PUT /$BUCKET/fleet//m_0123456789ab_r0/abc/de_g0/x.bin HTTP/1.1 forward$" "$S3_PROXY_LOG"
	S3_ENDPOINT=$S3_PROXY_URL run list_keys "$BUCKET"
	assert_output "fleet//m_0123456789ab_r0/abc/de_g0/x.bin 3000000"
	[ "$(s3_proxy_stat forwarded)" -eq 3 ]
	[ "$(s3_proxy_stat requests)" -eq 3 ]
	# boto3 too: the gateway checks the signature against the Host it
	# receives, the proxy's host:port the client signed
	AWS_ENDPOINT_URL=$S3_PROXY_URL s3_fill --bucket "$BUCKET" --prefix viaproxy --blocks 5 --size 100
	[ "$(s3_proxy_stat forwarded)" -eq 8 ]
}

@test "faultproxy.py: 503 SlowDown first, then the request passes (the aws CLI retries)" {
	s3_requires aws curl
	s3_mkbucket "$BUCKET"
	echo hello >"$BATS_TEST_TMPDIR/f"
	s3_aws s3api put-object --bucket "$BUCKET" --key "/a//b.bin" --body "$BATS_TEST_TMPDIR/f" >/dev/null
	s3_proxy_start --slowdown 3
	run curl -s -i "$S3_PROXY_URL/$BUCKET"
	assert_line --partial "HTTP/1.1 503 Slow Down"
	assert_output --partial "<Error><Code>SlowDown</Code>"
	S3_ENDPOINT=$S3_PROXY_URL
	run s3_aws s3api get-object --bucket "$BUCKET" --key "/a//b.bin" "$BATS_TEST_TMPDIR/g"
	assert_success
	cmp "$BATS_TEST_TMPDIR/f" "$BATS_TEST_TMPDIR/g"
	[ "$(s3_proxy_stat slowdown)" -eq 3 ]
	[ "$(s3_proxy_stat forwarded)" -eq 1 ]
	run grep -c " slowdown$" "$S3_PROXY_LOG"
	assert_output 3
	# without retries the client sees the SlowDown
	s3_proxy_stop
	s3_proxy_start --slowdown 1
	run "$S3_PYTHON" - "$S3_PROXY_URL" "$BUCKET" <<'PY'
import sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1],
                  config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
try:
    s3.get_object(Bucket=sys.argv[2], Key="/a//b.bin")
    print("passed")
except Exception as e:
    print(type(e).__name__, e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"])
print(s3.get_object(Bucket=sys.argv[2], Key="/a//b.bin")["Body"].read().decode().strip())
PY
	assert_output "ClientError SlowDown 503
hello"
}

@test "faultproxy.py: a reset is seen, retried, and every K-th request takes the plan" {
	s3_requires aws curl boto3
	s3_mkbucket "$BUCKET"
	s3_proxy_start --reset 1 --control "$BATS_TEST_TMPDIR/control"
	run -56 curl -s "$S3_PROXY_URL/$BUCKET"
	[ "$(s3_proxy_stat reset)" -eq 1 ]
	# rearmed by the control file: a client without retries sees the reset,
	# one with retries gets through
	printf 'reset 1\n' >"$BATS_TEST_TMPDIR/control"
	run "$S3_PYTHON" - "$S3_PROXY_URL" "$BUCKET" "$BATS_TEST_TMPDIR/control" <<'PY'
import sys, boto3
from botocore.config import Config
def client(n):
    return boto3.client("s3", endpoint_url=sys.argv[1],
                        config=Config(retries={"total_max_attempts": n, "mode": "standard"}))
try:
    client(1).list_objects_v2(Bucket=sys.argv[2])
    print("passed")
except Exception as e:
    print(type(e).__name__)
open(sys.argv[3], "w").write("reset 2\n")
print(client(3).list_objects_v2(Bucket=sys.argv[2])["KeyCount"])
PY
	assert_line -n 0 --regexp '^(ConnectionClosedError|EndpointConnectionError|ProtocolError)$'
	assert_line -n 1 0
	[ "$(s3_proxy_stat reset)" -eq 4 ]
	# every 3rd request a 500 or a SlowDown without end: a threaded fill
	# with retries still stores every object
	printf 'every 3\nerror500 0\n' >"$BATS_TEST_TMPDIR/control"
	AWS_ENDPOINT_URL=$S3_PROXY_URL s3_fill --bucket "$BUCKET" --prefix f --models 2 \
		--blocks 10 --size 5000 --threads 4 --print >"$BATS_TEST_TMPDIR/want"
	[ "$(s3_proxy_stat error500)" -ge 6 ]
	LC_ALL=C sort "$BATS_TEST_TMPDIR/want" | diff - <(list_keys "$BUCKET")
	printf 'slowdown 1\n' >"$BATS_TEST_TMPDIR/control"
	S3_ENDPOINT=$S3_PROXY_URL run list_keys "$BUCKET"
	assert_success
	[ "${#lines[@]}" -eq 20 ]
	[ "$(s3_proxy_stat slowdown)" -eq 1 ]
}

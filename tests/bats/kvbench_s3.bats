#!/usr/bin/env bats
# kvbench run on an s3:// --dir, against a real S3 server (Ceph's RADOS
# Gateway from tests/s3/s3server.sh, one for the file): PUT and GET
# figures in its JSON, objects at the keys vLLM's obj tier writes, only
# what it wrote deleted at the end, a missing bucket and file-only
# options refused.  Skips with the reason where the server cannot start.
# No timings are asserted: the figures only have to be there.

load test_helper

load s3_server

setup_file() { s3_setup_file; }
teardown_file() { s3_teardown_file; }

setup() {
	common_setup
	BUCKET=kvb$BATS_TEST_NUMBER-$$
}

# bucket_requires: the server, aws and jq, and this test's bucket.
bucket_requires() {
	s3_requires aws jq
	s3_mkbucket "$BUCKET"
}

# list_keys [PREFIX]: the bucket's keys, sorted.
list_keys() {
	s3_aws s3api list-objects-v2 --bucket "$BUCKET" ${1:+--prefix "$1"} --output json |
		jq -r '.Contents[]?.Key' | LC_ALL=C sort
}

# phase FILE NAME FIELD: one figure of a phase of a -J document.
phase() {
	jq -r --arg p "$2" ".phases[] | select(.phase == \$p) | $3" "$1"
}

@test "kvbench run on s3://bucket/prefix: PUT and GET figures per block size, only its own objects deleted" {
	bucket_requires
	echo keep | s3_aws s3 cp - "s3://$BUCKET/bench/keep.txt" >/dev/null
	echo other | s3_aws s3 cp - "s3://$BUCKET/other/x.bin" >/dev/null
	local bs files out
	for bs in 64K 256K; do
		out=$BATS_TEST_TMPDIR/run-$bs.json
		run --separate-stderr kvbench run --dir "s3://$BUCKET/bench" --block-size "$bs" \
			--size 1M --threads 2 --qd 4 --phases write,read,lookup --lookups 20 -J
		[ "$status" -eq 0 ] || fail "$bs: $stderr"
		printf '%s\n' "$output" >"$out"
		files=$(jq .config.files "$out")
		assert_equal "$(jq -r .config.engine "$out")" s3
		assert_equal "$(jq -r .config.dir "$out")" "s3://$BUCKET/bench"
		assert_equal "$(jq -r .environment.object_store.endpoint "$out")" "$AWS_ENDPOINT_URL"
		assert_equal "$(phase "$out" write .latency.write.count)" "$files"
		assert_equal "$(phase "$out" read .latency.read.count)" "$files"
		(($(phase "$out" write .throughput_Bps) > 0))
		(($(phase "$out" read .throughput_Bps) > 0))
		(($(phase "$out" write .latency.write.p50_ns) > 0))
		(($(phase "$out" read .latency.read.p99_ns) > 0))
		assert_equal "$(phase "$out" lookup .hits)" 10
		assert_equal "$(phase "$out" lookup .misses)" 10
	done
	# Nothing kvbench wrote is left; what was there before is.
	run list_keys
	assert_output "bench/keep.txt
other/x.bin"
}

@test "kvbench run on a bucket: objects at PREFIX//<block path> as vLLM writes them, --keep leaves them" {
	bucket_requires
	run --separate-stderr kvbench run --dir "s3://$BUCKET/pfx" --block-size 128K \
		--size 512K --threads 1 --qd 2 --phases write --keep -J
	[ "$status" -eq 0 ] || fail "$stderr"
	local model
	model=$(jq -r .config.model_dir <<<"$output")
	run list_keys
	[ "${#lines[@]}" -eq 4 ] || fail "want 4 objects: $output"
	local k
	for k in "${lines[@]}"; do
		[[ $k =~ ^pfx//${model}_r0/[0-9a-f]+/ ]] || fail "key not in vLLM's form: $k"
	done
	# kvls reads them as blocks of that model.
	run --separate-stderr kvls --root "s3://$BUCKET/pfx" --blocks
	[ "$status" -eq 0 ] || fail "$stderr"
	[ "$(grep -c "$model" <<<"$output")" -eq 4 ] || fail "$output"
}

@test "kvbench run on a bucket: a read phase alone stores its working set first, text output, then deletes it" {
	bucket_requires
	echo keep | s3_aws s3 cp - "s3://$BUCKET/keep.txt" >/dev/null
	run --separate-stderr kvbench run --dir "s3://$BUCKET" --block-size 64K --size 256K \
		--threads 2 --qd 2 --phases read,mixed
	[ "$status" -eq 0 ] || fail "$stderr"
	assert_line --partial "dir s3://$BUCKET: S3 bucket at $AWS_ENDPOINT_URL"
	assert_line --partial "engine s3, 2 threads x 2 requests in flight"
	assert_line --regexp '^read +read +4 '
	run list_keys
	assert_output "keep.txt"
}

@test "kvbench run on a missing bucket: exit 3 naming it" {
	bucket_requires
	run --separate-stderr kvbench run --dir "s3://nosuch-$BUCKET/p" --block-size 64K --size 256K
	[ "$status" -eq 3 ] || fail "status $status: $stderr"
	[[ $stderr == *"cannot open 's3://nosuch-$BUCKET/p'"*"nosuch-$BUCKET"* ]] || fail "$stderr"
}

@test "kvbench run on a bucket: file-only options refused by name, exit 2" {
	# Refused before any request: no server needed.
	local opt
	for opt in --direct --buffered --in-place "--fsync file" --drop-caches \
		--registered-buffers --sqpoll "--engine kvio" "--phases write,create"; do
		# shellcheck disable=SC2086
		run --separate-stderr kvbench run --dir s3://kvb-none/p --size 1M $opt
		[ "$status" -eq 2 ] || fail "$opt: status $status: $stderr"
		[[ $stderr == *"${opt%% *}"*"does not apply to a bucket"* ]] ||
			fail "$opt: $stderr"
	done
	# The metadata phase as it was given: meta is not called create.
	for opt in meta write,stat; do
		run --separate-stderr kvbench run --dir s3://kvb-none/p --size 1M --phases "$opt"
		[ "$status" -eq 2 ] || fail "--phases $opt: status $status: $stderr"
		[[ $stderr == "kvbench: --phases ${opt#write,} does not apply to a bucket"* ]] ||
			fail "--phases $opt: $stderr"
	done
	run --separate-stderr kvbench run --dir s3://kvb-none/p --qd 300
	[ "$status" -eq 2 ] || fail "--qd 300: status $status"
	[[ $stderr == *"--qd 300"* ]] || fail "$stderr"
}

#!/usr/bin/env bats
# contrib/kubernetes: every manifest parses, and the kvevict pods run as
# Kubernetes would run them (args with $(VAR) expanded from the pod's
# environment, the volume's mount path our root): the CronJob's pod, and
# all the pods of the Indexed Job at once, which meet in one round.

load test_helper

top=$BATS_TEST_DIRNAME/../..
PY=${KV_PYTHON:-/usr/bin/python3}

setup() {
	common_setup
	requires jq
	"$PY" -c 'import yaml' 2>/dev/null || skip "needs python3-yaml"
}

# pods FILE: one JSON line per pod the manifest's (Cron)Job starts, each
# container's argv with $(VAR) expanded from its env and, in an Indexed
# Job, JOB_COMPLETION_INDEX; the volume mount path becomes $KV_ROOT.
pods() {
	"$PY" - "$1" "$KV_ROOT" <<'PY'
import json, re, sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
job = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
pod = job["template"]["spec"]
indexed = job.get("completionMode") == "Indexed"
for i in range(job.get("completions", 1) if indexed else 1):
    for c in pod["containers"]:
        env = {e["name"]: e.get("value", "") for e in c.get("env", [])}
        if indexed:
            env["JOB_COMPLETION_INDEX"] = str(i)
        mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
        argv = []
        for a in c.get("command", []) + c.get("args", []):
            a = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a)
            for m in mounts:
                a = sys.argv[2] if a == m else a
            argv.append(a)
        print(json.dumps({"index": i, "argv": argv, "parallelism": job.get("parallelism", 1)}))
PY
}

@test "every Kubernetes manifest in contrib parses and names a program of ours" {
	local f
	for f in "$top"/contrib/kubernetes/*.yaml; do
		run "$PY" -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); assert d["apiVersion"] and d["kind"]' "$f"
		[ "$status" -eq 0 ] || fail "$f: $output"
	done
	run pods "$top/contrib/kubernetes/kvevict-cronjob.yaml"
	assert_success
	[ "$(jq -r '.argv[0]' <<<"$output")" = kvevict ]
}

@test "the kvevict CronJob's pod runs as written" {
	pods "$top/contrib/kubernetes/kvevict-cronjob.yaml" > "$BATS_TEST_TMPDIR/pods"
	mapfile -t argv < <(jq -r '.argv[]' "$BATS_TEST_TMPDIR/pods")
	run --separate-stderr "${argv[@]}"
	assert_success
	[ "$(jq -r .root <<<"$output")" = "$KV_ROOT" ]
}

@test "the kvevict Indexed Job's pods run at once as its shards and meet in one round" {
	local f=$top/contrib/kubernetes/kvevict-indexedjob.yaml n i pids=()
	pods "$f" > "$BATS_TEST_TMPDIR/pods"
	n=$(wc -l < "$BATS_TEST_TMPDIR/pods")
	[ "$n" -ge 2 ] || fail "an Indexed Job of $n pods"
	[ "$(jq -r .parallelism "$BATS_TEST_TMPDIR/pods" | sort -u)" = "$n" ] ||
		fail "parallelism is not the completions, $n: not all shards run at once"
	for ((i = 0; i < n; i++)); do
		mapfile -t argv < <(jq -r "select(.index == $i) | .argv[]" "$BATS_TEST_TMPDIR/pods")
		[[ " ${argv[*]} " == *" --shard $i/$n "* ]] || fail "pod $i: ${argv[*]}"
		"${argv[@]}" > "$BATS_TEST_TMPDIR/out.$i" 2> "$BATS_TEST_TMPDIR/err.$i" &
		pids+=($!)
	done
	for ((i = 0; i < n; i++)); do
		wait "${pids[i]}" || fail "pod $i exited $?: $(cat "$BATS_TEST_TMPDIR/err.$i")"
	done
	jq -s -e --argjson n "$n" 'all(.[]; .shards_merged == $n and .shard_count == $n) and
		(map(.shard_round) | unique | length == 1) and
		(map(.shard_index) | sort == [range($n)])' "$BATS_TEST_TMPDIR"/out.* ||
		fail "$(cat "$BATS_TEST_TMPDIR"/out.*)"
}

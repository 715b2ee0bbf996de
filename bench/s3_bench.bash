# Sourced by the bench scripts that run against a bucket (s3.sh,
# offd-s3.sh), from the repository root, with PY set to a python3 that has
# boto3.

# s3_bench_start NAME SRV: start tests/s3/s3server.sh's gateway in SRV,
# its env in this shell and rclone configured for it (remote "s3:");
# exit 77 with one line saying why when there is no server here, 1 when
# it fails to start.
s3_bench_start() {
	local rc=0
	tests/s3/s3server.sh start "$2" > /dev/null 2> "$2.err" < /dev/null || rc=$?
	if [ "$rc" -ne 0 ]; then
		# s3server.sh's reason is its last line.
		echo "$1: no S3 server: $(tail -n 1 "$2.err")"
		[ "$rc" -eq 77 ] && exit 77
		exit 1
	fi
	# shellcheck disable=SC1091
	. "$2/env"
	# rclone 1.60's AWS SDK refuses any AWS_CA_BUNDLE ("LoadCustomCABundleError:
	# ... unsupported transport"); the endpoint is plain http anyway.
	unset AWS_CA_BUNDLE
	: > "$2.rclone.conf"
	export RCLONE_CONFIG=$2.rclone.conf RCLONE_CONFIG_S3_TYPE=s3 RCLONE_CONFIG_S3_PROVIDER=Ceph \
		RCLONE_CONFIG_S3_ENDPOINT=$AWS_ENDPOINT_URL RCLONE_CONFIG_S3_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID \
		RCLONE_CONFIG_S3_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY
}

# s3util mk | count PREFIX | rm PREFIX: make bucket $B, or print "objects
# bytes" under PREFIX/ in it, or delete them (printing what they were).
s3util() {
	"$PY" - "$B" "$@" <<'PY'
import os, sys, boto3
from botocore.config import Config
bucket, op = sys.argv[1], sys.argv[2]
s3 = boto3.session.Session().client(
    "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name=os.environ["AWS_REGION"],
    config=Config(s3={"addressing_style": "path"}))
if op == "mk":
    s3.create_bucket(Bucket=bucket)
    sys.exit(0)
n = size = 0
keys = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=sys.argv[3] + "/"):
    for o in page.get("Contents", []):
        n += 1
        size += o["Size"]
        keys.append(o["Key"])
if op == "rm":
    for i in range(0, len(keys), 1000):
        r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                                     "Quiet": True})
        if r.get("Errors"):
            sys.exit("delete failed: %s" % r["Errors"][:3])
print(n, size)
PY
}

#!/usr/bin/env bash
# Installs dependencies, builds larder and runs it in the foreground.
#
# Without LARDER_UPSTREAM_URL and without a config file (LARDER_CONFIG, or
# --config FILE among the arguments, which go to `larder serve`), a local demo
# upstream is started first: moto on 127.0.0.1:9000 (no signature checks) with
# a bucket `demo` holding two objects; it is stopped when larder exits. A config
# file names its own upstream (or S3's), and its own keys. Without
# LARDER_CLIENT_KEY or a config file, a fixed demo key pair is used and the
# exports to reach larder with the AWS CLI are printed. Every other LARDER_*
# setting is read from the environment (see config/larder.conf).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

deps_rc=0
scripts/deps.sh run || deps_rc=$?
if ((deps_rc != 0 && deps_rc != 2)); then exit "$deps_rc"; fi
scripts/build.sh plain
BIN="${LARDER_BUILD_DIR:-build}/gateway/larder"

listen="${LARDER_LISTEN:-127.0.0.1:8080}" # larder's default; a config file may say another
moto_pid=""
larder_pid=""
cleanup() {
  if [[ -n "$larder_pid" ]] && kill -0 "$larder_pid" 2>/dev/null; then kill -TERM "$larder_pid" 2>/dev/null || true; fi
  if [[ -n "$moto_pid" ]] && kill -0 "$moto_pid" 2>/dev/null; then kill -TERM "$moto_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

config="${LARDER_CONFIG:-}"
for arg in "$@"; do
  case "$arg" in --config|--config=*) config=yes ;; esac
done

if [[ -z "${LARDER_UPSTREAM_URL:-}" && -z "$config" ]]; then
  if ((deps_rc == 2)); then
    echo "run.sh: LARDER_UPSTREAM_URL is unset and the demo upstream needs python3 with moto and boto3" >&2
    exit 1
  fi
  demo_port=9000
  if (exec 3<>"/dev/tcp/127.0.0.1/$demo_port") 2>/dev/null; then
    echo "run.sh: port $demo_port is busy; set LARDER_UPSTREAM_URL or free the port" >&2
    exit 1
  fi
  echo "run.sh: starting demo upstream (moto) on 127.0.0.1:$demo_port"
  python3 -m moto.server -H 127.0.0.1 -p "$demo_port" >/dev/null 2>&1 </dev/null &
  moto_pid=$!
  export LARDER_UPSTREAM_URL="http://127.0.0.1:$demo_port"
  export LARDER_UPSTREAM_REGION="${LARDER_UPSTREAM_REGION:-us-east-1}"
  export LARDER_UPSTREAM_ADDRESSING="${LARDER_UPSTREAM_ADDRESSING:-path}"
  # moto runs without signature checks here: any upstream key pair will do.
  export AWS_ACCESS_KEY_ID="demo-upstream-key" AWS_SECRET_ACCESS_KEY="demo-upstream-secret"
  python3 - "$LARDER_UPSTREAM_URL" <<'PY'
import sys, time, boto3
url = sys.argv[1]
s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                  aws_access_key_id="demo-upstream-key", aws_secret_access_key="demo-upstream-secret")
for _ in range(100):
    try:
        s3.list_buckets()
        break
    except Exception:
        time.sleep(0.1)
s3.create_bucket(Bucket="demo")
s3.put_object(Bucket="demo", Key="hello.txt", Body=b"hello from larder's demo upstream\n")
s3.put_object(Bucket="demo", Key="data/numbers.csv", Body=b"n,square\n1,1\n2,4\n3,9\n")
PY
fi

if [[ -z "${LARDER_CLIENT_KEY:-}" && -z "$config" ]]; then
  export LARDER_CLIENT_KEY="LARDERDEMOKEY0000001"
  export LARDER_CLIENT_SECRET="larder-demo-secret-do-not-use-in-production"
  cat <<MSG

larder demo key (read-write on every bucket). In another shell:

  export AWS_ACCESS_KEY_ID=$LARDER_CLIENT_KEY
  export AWS_SECRET_ACCESS_KEY=$LARDER_CLIENT_SECRET
  export AWS_DEFAULT_REGION=us-east-1
  export AWS_ENDPOINT_URL=http://$listen
  aws --endpoint-url http://$listen s3 ls

MSG
fi

echo "run.sh: starting larder (upstream ${LARDER_UPSTREAM_URL:-as the config file says}); Ctrl-C stops it"
"$BIN" serve "$@" &
larder_pid=$!
trap 'kill -TERM "$larder_pid" 2>/dev/null || true' INT TERM
rc=0
wait "$larder_pid" || rc=$?
# A trapped signal interrupts wait; wait again for larder's own exit status.
if kill -0 "$larder_pid" 2>/dev/null; then wait "$larder_pid" || rc=$?; fi
larder_pid=""
exit "$rc"

#!/usr/bin/env bash
# Installs what building and testing larder needs on Debian 12 (apt-get, non-interactive).
# A second run only checks (dpkg-query) and returns at once.
#   scripts/deps.sh        what the test suite needs (scripts/test.sh)
#   scripts/deps.sh run    only what building larder and its demo upstream need
#                          (scripts/run.sh): no test clients, no browser, no npm
set -euo pipefail
mode="${1:-test}"
case "$mode" in run|test) ;; *) echo "usage: $0 [run|test]" >&2; exit 64 ;; esac

PACKAGES=(
  meson ninja-build pkg-config gcc clang libclang-rt-14-dev
  libmicrohttpd-dev libcurl4-openssl-dev libssl-dev libjemalloc-dev libev-dev
  libhiredis-dev libcmocka-dev libjansson-dev libinih-dev libexpat1-dev zlib1g-dev libisal-dev
  curl procps python3
)
if [[ "$mode" == test ]]; then
  PACKAGES+=(
    redis-server s3cmd rclone nodejs openssl docker-compose python3-yaml
    # clients the training workload uses, for Debian's /usr/bin/python3: the AWS
    # CRT S3 client (aws-c-s3), PyTorch, fsspec, boto3; s3fs is the FUSE client
    python3-awscrt python3-torch python3-fsspec python3-boto3 python3-requests s3fs
    # fsspec's HTTP filesystem needs aiohttp (an optional dependency of python3-fsspec)
    python3-aiohttp
    # the dashboard (GET /ui) is tested in a real browser, headless
    chromium fonts-liberation
  )
fi

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
# npm: Debian's package, unless the installed nodejs brings its own (NodeSource's
# nodejs includes npm and conflicts with Debian's npm package).
[[ "$mode" == run ]] || command -v npm >/dev/null 2>&1 || missing+=(npm)

if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
fi

# tests/integration/clients/test_clients.py drives larder with the AWS SDK for JavaScript
# v3, installed from the npm registry into tests/integration/clients/node/node_modules
# (versions from its package.json). Only when missing; a failure is fatal.
NODE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/integration/clients/node"
if [[ "$mode" == test ]] && [[ ! -d "$NODE_DIR/node_modules/@aws-sdk/client-s3" || ! -d "$NODE_DIR/node_modules/@aws-sdk/lib-storage" ]]; then
  echo "deps: npm install in tests/integration/clients/node" >&2
  if ! (cd "$NODE_DIR" && npm install --no-audit --no-fund --no-package-lock --no-update-notifier </dev/null >&2); then
    echo "deps: npm install of the AWS SDK for JavaScript failed (see above)" >&2
    exit 1
  fi
fi

# The integration tests drive larder with boto3 and the AWS CLI against moto.
# They come from PyPI, which this script does not use: say so clearly.
py_ok=1
if ! python3 -c 'import boto3, botocore, moto, requests, werkzeug' 2>/dev/null; then
  py_ok=0
  echo "deps: python3 cannot import boto3, botocore, moto (>= 5), requests and werkzeug." >&2
fi
if [[ "$mode" == test ]] && ! command -v aws >/dev/null 2>&1; then
  py_ok=0
  echo "deps: the AWS CLI (aws) is not on PATH." >&2
fi
if ((py_ok == 0)); then
  echo "deps: install them into a virtual environment first on PATH (Debian 12's own python3 refuses" >&2
  echo "deps: pip installs, PEP 668):" >&2
  echo "deps:   apt-get install -y python3-venv && python3 -m venv ~/.larder-venv &&" >&2
  echo "deps:   ~/.larder-venv/bin/pip install 'boto3' 'moto[server]>=5' requests awscli &&" >&2
  echo "deps:   export PATH=~/.larder-venv/bin:\$PATH" >&2
  echo "deps: building works without them; scripts/test.sh and the demo upstream of scripts/run.sh need them." >&2
  exit 2
fi

#!/usr/bin/env bash
# Installs what the load-test scripts need (CI runs them at smoke size): nginx with the
# echo module (the origin's delay), gnuplot (the pictures). Debian/Ubuntu apt.
set -euo pipefail
need=()
command -v nginx >/dev/null 2>&1 || need+=(nginx-light)
modules="$(nginx -V 2>&1 | sed -n 's/.*--modules-path=\([^ ]*\).*/\1/p' || true)"
[[ -f "${modules:-/nonexistent}/ngx_http_echo_module.so" ]] || need+=(libnginx-mod-http-echo)
command -v gnuplot >/dev/null 2>&1 || need+=(gnuplot-nox)
command -v taskset >/dev/null 2>&1 || need+=(util-linux)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
if ((${#need[@]})); then
  echo "deps: installing ${need[*]}" >&2
  sudo=""; ((EUID == 0)) || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
# nginx's packaged service is not used; the scripts run their own instances.

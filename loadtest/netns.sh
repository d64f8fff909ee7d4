#!/usr/bin/env bash
# A network namespace for the origin, reached over a veth pair:
#   netns.sh up    creates namespace larder-lt with 10.77.0.2/24 inside, 10.77.0.1/24 on the host
#   netns.sh down  removes it (and the veth pair with it); safe to repeat
# Prints the origin's address on success. Exit 1 if namespaces cannot be made here.
set -uo pipefail
ns="${LOADTEST_NETNS_NAME:-larder-lt}"
host_if="lt-host0" ns_if="lt-ns0" host_ip=10.77.0.1 ns_ip=10.77.0.2
down() {
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$host_if" 2>/dev/null || true
}
case "${1:-}" in
  up)
    if ip netns list 2>/dev/null | grep -qw "$ns"; then echo "$ns_ip"; exit 0; fi
    { ip netns add "$ns" &&
      ip link add "$host_if" type veth peer name "$ns_if" &&
      ip link set "$ns_if" netns "$ns" &&
      ip addr add "$host_ip/24" dev "$host_if" &&
      ip link set "$host_if" up &&
      ip -n "$ns" addr add "$ns_ip/24" dev "$ns_if" &&
      ip -n "$ns" link set "$ns_if" up &&
      ip -n "$ns" link set lo up; } || { down; exit 1; }
    echo "$ns_ip"
    ;;
  down) down ;;
  *) echo "usage: netns.sh up|down" >&2; exit 2 ;;
esac

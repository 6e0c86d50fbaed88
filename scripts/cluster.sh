#!/usr/bin/env bash
# Nodes in one box: network namespaces joined by a switch, each node with its own
# address, its own host name and a rate cap on its link, for multi-node runs and network
# faults without a second machine.
#
#   scripts/cluster.sh up N [--rate=100mbit|1gbit|10gbit|RATE]   N nodes (prints nothing)
#   scripts/cluster.sh run NODE -- CMD [ARGS...]                  CMD on node NODE (0..N-1)
#   scripts/cluster.sh addr NODE                                  node NODE's address
#   scripts/cluster.sh rate NODE RATE                             a new cap on NODE's link
#   scripts/cluster.sh link NODE down|up                          NODE's link cut or restored
#   scripts/cluster.sh down                                       everything removed
#
# Node k is the namespace "$DPB_CLUSTER-nk" (DPB_CLUSTER, default "dpbc", names a
# cluster, so that several can exist at once), with address 10.99.0.(k+1)/24 on its
# interface "eth0", whose other end is a port of a bridge in the namespace
# "$DPB_CLUSTER-sw". The addresses exist only inside these namespaces, with no route out
# of them. The rate (tc's tbf) caps both directions of each node's link: what the node
# sends on eth0 and what the switch sends to it. `run` gives the command a UTS namespace
# of its own named after the node, so that each node has its own host name, and the
# node's share of the cores (node_cores), as real nodes have their own.
#
# `up` removes the cluster first if one of the same name exists, and a cluster whose
# creator (recorded at `up`) is gone; `up` that fails half way removes what it made. Needs
# root, `ip netns` and `unshare`; says which is missing and exits 2 otherwise.
set -eEuo pipefail

name="${DPB_CLUSTER:-dpbc}"
state="/run/dpb-cluster"

die() {
  echo "cluster.sh: $*" >&2
  exit 2
}

usage() {
  sed -n '6,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

need() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
  command -v ip >/dev/null || die "needs ip (iproute2)"
  command -v tc >/dev/null || die "needs tc (iproute2)"
  command -v unshare >/dev/null || die "needs unshare (util-linux)"
}

check_name() {
  [[ "$name" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "DPB_CLUSTER '$name' must be 1-8 lower-case letters and digits, a letter first"
}

node_ns() { echo "$name-n$1"; }

nodes() { cat "$state/$name/nodes" 2>/dev/null || echo 0; }

# Node K's cores: the machine's cores (those this process may use) shared out, each node
# its own where there are enough, as separate machines have (ranks pin themselves to the
# cores they are given: two nodes' rank 0 would otherwise both take the first core).
node_cores() {
  local all n per first k list=""
  all=($(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' | awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }'))
  n="$(nodes)"
  per=$(( ${#all[@]} / n ))
  [ "$per" -ge 1 ] || per=1
  first=$(( ($1 * per) % ${#all[@]} ))
  for ((k = 0; k < per; k++)); do list="$list${list:+,}${all[$(( (first + k) % ${#all[@]} ))]}"; done
  echo "$list"
}

check_node() {
  local n
  n="$(nodes)"
  [ "$n" -gt 0 ] || die "no cluster '$name' is up (scripts/cluster.sh up N)"
  [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -lt "$n" ] || die "node '$1' is not one of 0..$((n - 1))"
}

check_rate() {
  [[ "$1" =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit)$ ]] || die "rate '$1' is not a rate such as 100mbit, 1gbit or 10gbit"
}

# tbf on DEV in NS at RATE: a bucket of 1 ms of traffic (at least 16 KiB, ten frames),
# so that a message is paced at the rate from its first bytes, as on a real link (a
# bucket of 10 ms let 125 KB through at the speed of memory at 100 Mbit/s); a queue of
# 100 ms (tbf splits a segmentation-offload packet larger than the bucket into frames).
cap() {
  local ns="$1" dev="$2" rate="$3" bps burst
  bps="$(rate_bits "$rate")"
  burst=$((bps / 8 / 1000))
  [ "$burst" -ge 16384 ] || burst=16384
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
}

rate_bits() {
  local v="${1%bit}" mult=1
  case "$v" in
    *k) mult=1000; v="${v%k}" ;;
    *m) mult=1000000; v="${v%m}" ;;
    *g) mult=1000000000; v="${v%g}" ;;
  esac
  awk -v v="$v" -v m="$mult" 'BEGIN { printf "%d\n", v * m }'
}

down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-(n[0-9]+|sw)$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "${state:?}/$name"
}

# Clusters whose creator has ended: left by a test that was killed.
reap_orphans() {
  local dir owner
  for dir in "$state"/*/; do
    [ -d "$dir" ] || continue
    owner="$(cat "$dir/owner" 2>/dev/null || echo)"
    if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
      DPB_CLUSTER="$(basename "$dir")" name="$(basename "$dir")" down
    fi
  done
}

up() {
  local n="${1:-}" rate="" arg
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up needs a node count from 1 to 200, not '${n}'"
  shift
  for arg in "$@"; do
    case "$arg" in
      --rate=*) rate="${arg#--rate=}"; check_rate "$rate" ;;
      *) die "unknown option '$arg' for up (valid: --rate=RATE)" ;;
    esac
  done
  mkdir -p "$state"
  reap_orphans
  down
  trap 'down; die "up failed; nothing is left"' ERR
  mkdir -p "$state/$name"
  echo "${DPB_CLUSTER_OWNER:-$PPID}" >"$state/$name/owner"
  local sw="$name-sw" k ns port
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for ((k = 0; k < n; k++)); do
    ns="$(node_ns "$k")"
    port="p$k"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" link add eth0 type veth peer name "$port" netns "$sw"
    ip -n "$ns" addr add "10.99.0.$((k + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$sw" link set "$port" master br0
    ip -n "$sw" link set "$port" up
    if [ -n "$rate" ]; then
      cap "$ns" eth0 "$rate"
      cap "$sw" "$port" "$rate"
    fi
  done
  echo "$n" >"$state/$name/nodes"
  echo "${rate:-none}" >"$state/$name/rate"
  trap - ERR
}

cmd="${1:-}"
[ -n "$cmd" ] || usage
shift
check_name
case "$cmd" in
  up)
    need
    up "$@"
    ;;
  down)
    need
    down
    ;;
  addr)
    [ $# -eq 1 ] || usage
    check_node "$1"
    echo "10.99.0.$(($1 + 1))"
    ;;
  run)
    need
    [ $# -ge 3 ] && [ "$2" = "--" ] || usage
    check_node "$1"
    node="$1"
    shift 2
    exec ip netns exec "$(node_ns "$node")" unshare --uts taskset -c "$(node_cores "$node")" \
      sh -c 'hostname "$0" && exec "$@"' "$name-n$node" "$@"
    ;;
  rate)
    need
    [ $# -eq 2 ] || usage
    check_node "$1"
    check_rate "$2"
    cap "$(node_ns "$1")" eth0 "$2"
    cap "$name-sw" "p$1" "$2"
    echo "$2" >"$state/$name/rate"
    ;;
  link)
    need
    [ $# -eq 2 ] && { [ "$2" = up ] || [ "$2" = down ]; } || usage
    check_node "$1"
    ip -n "$name-sw" link set "p$1" "$2"
    ;;
  *)
    die "unknown command '$cmd' (valid: up, run, addr, rate, link, down)"
    ;;
esac

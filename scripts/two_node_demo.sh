#!/usr/bin/env bash
# Two "nodes" on one machine: network namespaces joined by a veth link, redis-server (with a
# password) as the rendezvous store in the first, one `cann-train run` agent per namespace with
# 2 workers each. Needs root and a built tree. Extra arguments go to both agents.
#
#   sudo scripts/two_node_demo.sh --steps 20
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(pwd)/build/cann-train
ns1=cann-demo1 ns2=cann-demo2 pw=cann-demo-$$
cleanup() {
  for ns in $ns1 $ns2; do
    ip netns pids $ns 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del $ns 2>/dev/null || true
  done
}
trap cleanup EXIT
cleanup
ip netns add $ns1 && ip netns add $ns2
ip link add cdv1 type veth peer name cdv2
ip link set cdv1 netns $ns1 && ip link set cdv2 netns $ns2
ip -n $ns1 addr add 10.232.0.1/24 dev cdv1 && ip -n $ns2 addr add 10.232.0.2/24 dev cdv2
for ns in $ns1 $ns2; do ip -n $ns link set lo up; done
ip -n $ns1 link set cdv1 up && ip -n $ns2 link set cdv2 up
ip netns exec $ns1 redis-server --bind 10.232.0.1 --port 6379 --requirepass "$pw" --save '' \
  --appendonly no >/dev/null &
sleep 0.5
args=(run --nnodes 2 --nproc-per-node 2 --rdzv "redis://:$pw@10.232.0.1:6379" --rdzv-id demo-$$ "$@")
ip netns exec $ns2 "$bin" "${args[@]}" > /tmp/cann-two-node-$$.log 2>&1 &
ip netns exec $ns1 "$bin" "${args[@]}"
wait $! || { echo "node 2 failed:"; cat /tmp/cann-two-node-$$.log; exit 1; }
echo "--- node 2 (namespace $ns2):"
cat /tmp/cann-two-node-$$.log
rm -f /tmp/cann-two-node-$$.log

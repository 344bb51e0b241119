#!/usr/bin/env bash
# Rejoin after a partition, on real processes: three `tempest agent`s, each in
# its own network namespace on a bridge (10.77.0.1-3), default (LAN) timing,
# mutual TLS, gossip key and API token. Each run cuts one node that is not the
# raft leader off from the other two with iptables (INPUT and OUTPUT drops in
# its namespace) for CUT seconds, heals, and measures how long after the heal
# the node is ready again (its /readyz answers 200), polling every 100 ms.
#
#   sudo env "PATH=$PATH" make netns-partition   # builds bin/tempest first
#   sudo RUNS=10 CUT=25 TEMPEST_BIN=bin/tempest deploy/netns/partition.sh
#
# Needs root, ip, iptables, curl and python3. Everything it creates (the
# namespaces tns1-3, the bridge tnsbr0, a FORWARD rule for it, the agents, a
# temporary directory) is removed when it exits, also on failure or Ctrl-C; it
# refuses to start while they exist (another run, or one that was killed:
# remove them with `ip netns del tnsN` and `ip link del tnsbr0`).
# docs/BENCHMARKS.md ("Rejoin after a partition") records its results.
set -euo pipefail
export LC_ALL=C # $EPOCHREALTIME with a decimal point

RUNS=${RUNS:-6}
CUT=${CUT:-25}
WORK=
BIN=${TEMPEST_BIN:-}
NS=(tns1 tns2 tns3)
BR=tnsbr0
PIDS=()

[ "$(id -u)" = 0 ] || { echo "partition.sh: needs root (network namespaces, iptables)" >&2; exit 2; }
if ip link show "$BR" >/dev/null 2>&1 || ip netns list | grep -qE '^tns[123]( |$)'; then
	echo "partition.sh: $BR or tns1-3 exist already (another run?); not touching them" >&2
	exit 2
fi

cleanup() {
	for p in "${PIDS[@]}"; do
		kill -9 "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	for ns in "${NS[@]}"; do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
		ip netns del "$ns" 2>/dev/null || true
	done
	ip link del "$BR" 2>/dev/null || true
	iptables -D FORWARD -i "$BR" -o "$BR" -j ACCEPT 2>/dev/null || true
	if [ -n "$WORK" ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
WORK=$(mktemp -d /tmp/tempest-netns.XXXXXX)

for t in ip iptables curl python3; do
	command -v "$t" >/dev/null || { echo "partition.sh: needs $t" >&2; exit 2; }
done
if [ -z "$BIN" ]; then
	BIN=$WORK/tempest
	(cd "$(dirname "$0")/../.." && CGO_ENABLED=0 go build -o "$BIN" ./cmd/node)
fi
BIN=$(realpath "$BIN")

now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }

# The network: a bridge and one namespace per node.
ip link add "$BR" type bridge
ip link set "$BR" up
iptables -I FORWARD 1 -i "$BR" -o "$BR" -j ACCEPT # hosts that drop bridged traffic
for i in 1 2 3; do
	ns=${NS[$((i - 1))]}
	ip netns add "$ns"
	ip link add "tnsv$i" type veth peer name eth0 netns "$ns"
	ip link set "tnsv$i" master "$BR" up
	ip -n "$ns" addr add "10.77.0.$i/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
done

# Secrets and agents.
S=$WORK/secrets
"$BIN" secrets init --dir "$S" --nodes n1,n2,n3 >/dev/null
for i in 1 2 3; do
	others=$(for j in 1 2 3; do if [ "$j" != "$i" ]; then printf '10.77.0.%s,' "$j"; fi; done)
	mkdir -p "$WORK/n$i"
	ip netns exec "${NS[$((i - 1))]}" "$BIN" agent --name "n$i" --data-dir "$WORK/n$i" \
		--tls-ca "$S/ca/ca.pem" --tls-cert "$S/n$i/node.pem" --tls-key "$S/n$i/node-key.pem" \
		--gossip-key-file "$S/gossip.key" --http-token-file "$S/http.token" \
		--http-addr 0.0.0.0:7948 --advertise "10.77.0.$i" \
		--gossip-addr "10.77.0.$i:7946" --quic-addr "10.77.0.$i:7947" \
		--join "${others%,}" --bootstrap-expect 3 >"$WORK/n$i.log" 2>&1 &
	PIDS+=($!)
done

ready() { ip netns exec "${NS[$(($1 - 1))]}" curl -s -m 1 -o /dev/null -w '%{http_code}' http://127.0.0.1:7948/readyz || true; }
readyz() { # the body and status of node $1's /readyz
	ip netns exec "${NS[$(($1 - 1))]}" curl -s -m 1 -w ' %{http_code}' http://127.0.0.1:7948/readyz | tr -d '\n' || true
}
placement() { # prints "LEADER UNDER_REPLICATED" as node $1 sees it
	ip netns exec "${NS[$(($1 - 1))]}" "$BIN" placement --json --addr http://127.0.0.1:7948 \
		--token-file "$S/http.token" 2>/dev/null |
		python3 -c 'import json,sys; p=json.load(sys.stdin); print(p.get("leader",""), p.get("under_replicated",0))' 2>/dev/null || true
}
settled() { # every node ready, a leader, every shard's in-sync set whole
	local j p
	for j in 1 2 3; do
		[ "$(ready "$j")" = 200 ] || return 1
		p=$(placement "$j")
		case "$p" in n[123]\ 0) ;; *) return 1 ;; esac
	done
}
await_settled() {
	local start
	start=$(now)
	until settled; do
		if awk -v a="$(now)" -v b="$start" 'BEGIN { exit !(a - b > 180) }'; then
			echo "partition.sh: the cluster did not settle within 180 s; logs in $WORK are removed on exit:" >&2
			tail -n 20 "$WORK"/n*.log >&2
			exit 1
		fi
		sleep 0.5
	done
	sleep 5
}

await_settled
echo "three agents ready; $RUNS runs, each cutting a node that is not the leader off for ${CUT}s"
results=()
pick=0
for run in $(seq 1 "$RUNS"); do
	read -r leader _ <<<"$(placement 1)"
	case "$leader" in n[123]) ;; *)
		echo "run $run: no raft leader known" >&2
		exit 1
		;;
	esac
	candidates=()
	for j in 1 2 3; do if [ "n$j" != "$leader" ]; then candidates+=("$j"); fi; done
	x=${candidates[$((pick % 2))]}
	pick=$((pick + 1))
	xns=${NS[$((x - 1))]}
	for j in 1 2 3; do
		[ "$j" = "$x" ] && continue
		ip netns exec "$xns" iptables -A INPUT -s "10.77.0.$j" -j DROP
		ip netns exec "$xns" iptables -A OUTPUT -d "10.77.0.$j" -j DROP
	done
	sleep "$CUT"
	# The cut node must have stopped serving (its lease lapsed) meanwhile.
	cutoff=$(ready "$x")
	if [ "$cutoff" = 200 ]; then
		echo "run $run: n$x still ready after ${CUT}s cut off" >&2
		exit 1
	fi
	ip netns exec "$xns" iptables -F
	healed=$(now)
	trace="" last=""
	while :; do
		body=$(readyz "$x")
		if [ "$body" != "$last" ]; then
			trace+="    +$(since "$(now)" "$healed")s ${body}"$'\n'
			last=$body
		fi
		[ "${body##* }" = 200 ] && break
		if awk -v a="$(now)" -v b="$healed" 'BEGIN { exit !(a - b > 120) }'; then
			echo "run $run: n$x not ready 120 s after the heal" >&2
			exit 1
		fi
		sleep 0.1
	done
	t=$(since "$(now)" "$healed")
	results+=("$t")
	echo "run $run: n$x (leader $leader) cut ${CUT}s (its /readyz then: $cutoff), ready ${t}s after the heal; /readyz after the heal:"
	printf '%s' "$trace"
	await_settled
done
printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
v = sorted(float(l) for l in sys.stdin)
print(f"ready after the heal: min {v[0]:.2f}s, median {statistics.median(v):.2f}s, max {v[-1]:.2f}s over {len(v)} runs")'

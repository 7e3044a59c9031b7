#!/usr/bin/env bash
# What one node of a three-node broker group needs at a given rate: a
# metaserver and a three-node group on 127.0.0.1 with TLS on every link and
# --auth (as deploy/ runs them), a fresh cluster for each case; each case
# sends at a fixed rate for DURATION with a consumer group acking
# everything (qmqctl bench produce --rate R --consume), and measures, per
# broker node: CPU (user + system seconds over the run, as cores), peak RSS
# (VmHWM) and the data directory's size at the end; and what the machine's
# disk was sent to write a second over the run, divided by the three nodes
# (/proc/diskstats of the disk under the data: a process's write_bytes is
# no measure here, since the kernel charges a whole large folio to a write
# that dirties part of one). Nothing else should run meanwhile. The client
# runs on the same machine and its CPU is not counted.
#
# Usage: test/bench-sizing.sh [DURATION] [CASES...]   (from the repository root)
#   DURATION  default 60s
#   CASES     RATE:SIZE pairs, default 1000:1024 5000:1024 20000:1024 20000:128
set -euo pipefail

duration=${1:-60s}
shift || true
cases=("$@")
if [ ${#cases[@]} = 0 ]; then cases=(1000:1024 5000:1024 20000:1024 20000:128); fi
work=$(mktemp -d /tmp/qmq-bench-sizing.XXXXXX)
# shellcheck source=test/bench-lib.sh
. test/bench-lib.sh
meta=127.0.0.1:7400
operator=(--tls-ca "$C/ca.pem" --tls-cert "$C/m1.pem" --tls-key "$C/m1-key.pem")
tick=$(getconf CLK_TCK)

# start: a fresh cluster; sets brokers (the three broker PIDs) and ctl.
start() {
	local d=$work/data
	rm -rf "$d" && mkdir -p "$d"
	tlsof() { echo "--tls-ca $C/ca.pem --tls-cert $C/$1.pem --tls-key $C/$1-key.pem --auth"; }
	# shellcheck disable=SC2046
	"$B/qmqd" meta --id m1 --data "$d/m1" --listen $meta --raft 127.0.0.1:7401 --bootstrap $(tlsof m1) >"$d/m1.log" 2>&1 &
	pids+=($!)
	brokers=()
	for i in 1 2 3; do
		local boot=()
		if [ $i = 1 ]; then boot=(--bootstrap); fi
		# shellcheck disable=SC2046
		"$B/qmqd" broker --broker-group g1 --id n$i --data "$d/n$i" --listen 127.0.0.1:741$i --raft 127.0.0.1:742$i \
			--http 127.0.0.1:743$i --open-http --meta $meta "${boot[@]}" $(tlsof n$i) >"$d/n$i.log" 2>&1 &
		pids+=($!)
		brokers+=($!)
	done
	for i in 2 3; do
		retry "$B/qmqctl" --server 127.0.0.1:7411 "${operator[@]}" join --broker-group g1 --id n$i --raft 127.0.0.1:742$i --addr 127.0.0.1:741$i
	done
	retry "$B/qmqctl" --server $meta "${operator[@]}" app create bench --send 'sizing*' --consume 'sizing*/*' \
		--secret-out "$d/bench.secret"
	ctl=(--server 127.0.0.1:7411,127.0.0.1:7412,127.0.0.1:7413 --tls-ca "$C/ca.pem" --tls-cert "$C/bench.pem"
		--tls-key "$C/bench-key.pem" --app bench --secret-file "$d/bench.secret")
	retry "$B/qmqctl" "${ctl[@]}" send --subject sizing-warm x
}

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }            # user + system, in ticks
disk=$(lsblk -no PKNAME "$(df --output=source "$work" | tail -1)" 2>/dev/null || true)
if [ -z "$disk" ]; then disk=$(basename "$(df --output=source "$work" | tail -1)"); fi
sectors() { awk -v d="$disk" '$3 == d {print $10}' /proc/diskstats; }   # 512-byte sectors written
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }      # KiB

printf '%-12s %-4s %8s %10s %9s %12s %12s   %s\n' case node role cores peak_MiB disk_MB/s data_MiB "achieved msgs/s, e2e p99 ms"
for c in "${cases[@]}"; do
	rate=${c%%:*} size=${c##*:}
	start
	declare -A cpu0
	for p in "${brokers[@]}"; do cpu0[$p]=$(cpu "$p"); done
	w0=$(sectors)
	t0=$(date +%s.%N)
	summary=$("$B/qmqctl" "${ctl[@]}" bench produce --subject "sizing-$rate-$size" --size "$size" --rate "$rate" \
		--duration "$duration" --consume sizing --json --no-progress)
	t1=$(date +%s.%N)
	w1=$(sectors)
	result=$(python3 -c 'import json,sys; s=json.load(sys.stdin); print(round(s["msgs_per_s"]), s["e2e_latency"]["p99_ms"])' <<<"$summary")
	leader=$(curl -sk https://127.0.0.1:7431/status | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])')
	for i in 1 2 3; do
		p=${brokers[$((i - 1))]}
		role=follower
		if [ "n$i" = "$leader" ]; then role=leader; fi
		awk -v c0="${cpu0[$p]}" -v c1="$(cpu "$p")" -v w0="$w0" -v w1="$w1" -v t0="$t0" -v t1="$t1" \
			-v tick="$tick" -v hwm="$(hwm "$p")" -v du="$(du -sk "$work/data/n$i" | cut -f1)" \
			-v cs="$rate:$size" -v n="n$i" -v role="$role" -v res="$result" \
			'BEGIN { s = t1 - t0; printf "%-12s %-4s %8s %10.2f %9.0f %12.1f %12.0f   %s\n", cs, n, role, (c1 - c0) / tick / s, hwm / 1024, (w1 - w0) * 512 / 3 / s / 1e6, du / 1024, res }'
	done
	stop
done

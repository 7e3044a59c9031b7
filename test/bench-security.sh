#!/usr/bin/env bash
# What security costs, on a metaserver and a three-node broker group on
# 127.0.0.1. Each round measures P1 (128 B, 1,000 in flight, 200,000
# messages), L1 (one send at a time for 10 s: its p50) and C1 (draining
# 200,000 messages as a new consumer group), as docs/benchmarks.md's
# "Produce and consume" does; it prints every figure, then the medians.
#
#   cost     a fresh cluster for each round of each of three modes, their
#            order rotating from round to round:
#              plain  no TLS, no --auth
#              tls    TLS on every link, client certificates required
#              auth   TLS and --auth: the client works as an application
#                     whose rights are checked on every request and message
#   hostile  one cluster in auth mode; rounds alternate quiet and hostile,
#            where `qmqctl bench hostile` meanwhile holds 2,000 idle
#            connections (from 16 loopback addresses) and says wrong
#            secrets in a loop on 4 goroutines, all against the broker
#            group's leader: P1 and L1 of the well-behaved application
#
# Usage: test/bench-security.sh cost|hostile [ROUNDS]   (default 3; from the repository root)
set -euo pipefail

what=${1:?usage: test/bench-security.sh cost|hostile [ROUNDS]}
rounds=${2:-3}
work=$(mktemp -d /tmp/qmq-bench-security.XXXXXX)
# shellcheck source=test/bench-lib.sh
. test/bench-lib.sh
meta=127.0.0.1:7400
servers=127.0.0.1:7411,127.0.0.1:7412,127.0.0.1:7413

# start MODE: a fresh cluster; sets ctl, the qmqctl flags a client of MODE uses.
start() {
	local mode=$1 d=$work/data
	rm -rf "$d" && mkdir -p "$d"
	local nodeflags=() operator=()
	if [ "$mode" != plain ]; then
		operator=(--tls-ca "$C/ca.pem" --tls-cert "$C/m1.pem" --tls-key "$C/m1-key.pem")
	fi
	tlsof() {
		if [ "$mode" = plain ]; then return; fi
		echo "--tls-ca $C/ca.pem --tls-cert $C/$1.pem --tls-key $C/$1-key.pem"
		if [ "$mode" = auth ]; then echo --auth; fi
	}
	# shellcheck disable=SC2046
	"$B/qmqd" meta --id m1 --data "$d/m1" --listen $meta --raft 127.0.0.1:7401 --bootstrap $(tlsof m1) >"$d/m1.log" 2>&1 &
	pids+=($!)
	for i in 1 2 3; do
		local boot=()
		if [ $i = 1 ]; then boot=(--bootstrap); fi
		# shellcheck disable=SC2046
		"$B/qmqd" broker --group g1 --id n$i --data "$d/n$i" --listen 127.0.0.1:741$i --raft 127.0.0.1:742$i \
			--meta $meta "${boot[@]}" $(tlsof n$i) >"$d/n$i.log" 2>&1 &
		pids+=($!)
	done
	for i in 2 3; do
		retry "$B/qmqctl" --server 127.0.0.1:7411 "${operator[@]}" join --group g1 --id n$i --raft 127.0.0.1:742$i --addr 127.0.0.1:741$i
	done
	ctl=(--server "$servers")
	case $mode in
	tls) ctl+=(--tls-ca "$C/ca.pem" --tls-cert "$C/bench.pem" --tls-key "$C/bench-key.pem") ;;
	auth)
		retry "$B/qmqctl" --server $meta "${operator[@]}" app create bench --send 'bench*' --consume 'bench*/*' \
			--secret-out "$d/bench.secret"
		ctl+=(--tls-ca "$C/ca.pem" --tls-cert "$C/bench.pem" --tls-key "$C/bench-key.pem" --app bench --secret-file "$d/bench.secret")
		;;
	esac
	retry "$B/qmqctl" "${ctl[@]}" send --subject bench-warm x
}

# field NAME: reads a bench summary's JSON on stdin and prints NAME.
field() { python3 -c "import json,sys; print(round(json.load(sys.stdin)$1, 2))"; }

results=$work/results

# measure MODE ROUND: P1, L1 and C1 (with --c1) as the client of ctl, one line to results.
measure() {
	local p1 l1 c1=-
	p1=$("$B/qmqctl" "${ctl[@]}" bench produce --subject "bench-p1-$2" --size 128 --count 200000 --inflight 1000 --json --no-progress | field '["msgs_per_s"]')
	l1=$("$B/qmqctl" "${ctl[@]}" bench produce --subject "bench-l1-$2" --size 128 --inflight 1 --duration 10s --json --no-progress | field '["latency"]["p50_ms"]')
	if [ "${3:-}" = --c1 ]; then
		"$B/qmqctl" "${ctl[@]}" bench produce --subject "bench-c1-$2" --size 128 --count 200000 --producers 4 --json --no-progress >/dev/null
		c1=$("$B/qmqctl" "${ctl[@]}" bench consume --subject "bench-c1-$2" --group d1 --count 200000 --json --no-progress | field '["msgs_per_s"]')
	fi
	echo "$1 $2 $p1 $l1 $c1" | tee -a "$results"
}

medians() {
	echo
	echo "medians over $rounds rounds: mode, P1 msgs/s, L1 p50 ms, C1 msgs/s"
	for mode in "$@"; do
		med() { grep "^$mode " "$results" | awk "{print \$$1}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
		echo "$mode $(med 3) $(med 4) $(med 5)"
	done
}

case $what in
cost)
	modes=(plain tls auth)
	for round in $(seq "$rounds"); do
		for k in 0 1 2; do
			mode=${modes[$(((round - 1 + k) % 3))]}
			start "$mode"
			measure "$mode" "$round" --c1
			stop
		done
	done
	medians plain tls auth
	;;
hostile)
	start auth
	from=$(seq -s, -f '127.0.0.%g' 2 17)
	for round in $(seq "$rounds"); do
		measure quiet "$round"
		"$B/qmqctl" --server 127.0.0.1:7411 --tls-ca "$C/ca.pem" --tls-cert "$C/bench.pem" --tls-key "$C/bench-key.pem" \
			bench hostile --loops 4 --idle 2000 --from "$from" --duration 10m >"$work/hostile.out" 2>&1 &
		hostile=$!
		for _ in $(seq 600); do grep -q holding "$work/hostile.out" && break; sleep 0.1; done
		measure hostile "$round"
		kill -INT $hostile; wait $hostile || true
		cat "$work/hostile.out"
	done
	stop
	medians quiet hostile
	;;
*)
	echo "usage: test/bench-security.sh cost|hostile [ROUNDS]" >&2
	exit 2
	;;
esac

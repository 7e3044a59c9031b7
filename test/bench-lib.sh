# What the benchmark scripts of test/ share; sourced from the repository
# root after `work` is set to the script's scratch directory:
#   pids    the servers started (append each PID), stopped by stop
#   stop    kills and waits for every PID in pids
#   retry   runs a command until it succeeds, 30 s at most
# and, on exit, stop and the removal of $work. It builds qmqd and qmqctl
# into $work/bin (B) and makes a CA, a node certificate for m1, n1, n2
# and n3 and a client certificate "bench" on 127.0.0.1 in $work/certs (C).

pids=()

stop() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	pids=()
}
trap 'stop; rm -rf "$work"' EXIT

# retry CMD...: runs CMD until it succeeds (a node just started may not listen yet), 30 s at most.
retry() {
	for _ in $(seq 300); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	"$@"
}

go build -o "$work/bin/" ./cli/qmqd ./cli/qmqctl
B=$work/bin
"$B/qmqctl" tls init --dir "$work/certs" --node m1=127.0.0.1 --node n1=127.0.0.1 --node n2=127.0.0.1 \
	--node n3=127.0.0.1 --client bench >/dev/null
C=$work/certs

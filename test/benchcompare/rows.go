package main

// row is one line of the comparison table.
type row struct {
	key    string // stable id
	short  string // the chart's label: digits, capitals, spaces and .-/%
	label  string // the table's
	unit   string
	higher bool    // a higher figure is better
	goal   float64 // qmq / NATS the project aims for (≥ when higher, ≤ otherwise); 0: none
}

// rows in the table's order. Goals, the project's (docs/benchmarks.md):
// twice NATS's throughput, three times the rate one consumer keeps up
// with, a lone send's p50 at most 0.6 of NATS's, and no more than NATS's
// latency, memory, disk and bytes written.
var rows = []row{
	{"async128", "ASYNC 128B", "async produce 128 B, 1,000 in flight", "msgs/s", true, 2},
	{"async1k", "ASYNC 1KIB", "async produce 1 KiB, 1,000 in flight", "msgs/s", true, 2},
	{"sync128", "SYNC 128B", "one in flight, 128 B", "msgs/s", true, 0},
	{"sync128p50", "SYNC P50", "one in flight, 128 B: p50", "ms", false, 0.6},
	{"drain128", "DRAIN 128B", "drain 128 B with acks", "msgs/s", true, 2},
	{"maxrate", "MAX RATE 1C", "highest fixed rate one consumer keeps up with, 128 B", "msgs/s", true, 3},
	{"e2e20kp99", "E2E P99 20K", "end to end p99 at 20,000 msgs/s, 128 B", "ms", false, 1},
	{"e2e20kp999", "E2E P99.9 20K", "end to end p99.9 at 20,000 msgs/s, 128 B", "ms", false, 1},
	{"e2e20krate", "E2E 20K RATE", "rate achieved when asked for 20,000 msgs/s with a consumer", "msgs/s", true, 0},
	{"e2ehalfp99", "E2E P99 HALF", "end to end p99 at half the max async 128 B rate", "ms", false, 1},
	{"e2ehalfrate", "HALF RATE", "rate achieved when asked for half the max async 128 B rate", "msgs/s", true, 0},
	{"rss", "RSS", "RSS per node after the runs (VmRSS, largest node)", "MiB", false, 1},
	{"hwm", "PEAK RSS", "peak RSS per node (VmHWM, largest node)", "MiB", false, 1},
	{"disk", "DISK", "disk per node after the runs (du of the data directory, mean)", "MiB", false, 1},
	{"wbytes", "WRITTEN/B", "bytes written per node per message byte (write_bytes, async 128 B)", "B/B", false, 1},
}

// workloads are what --only picks, and the rows each fills.
var workloads = []struct {
	name string
	rows []string
}{
	{"async-128", []string{"async128", "wbytes"}},
	{"async-1k", []string{"async1k"}},
	{"sync-128", []string{"sync128", "sync128p50"}},
	{"drain-128", []string{"drain128"}},
	{"max-rate", []string{"maxrate"}},
	{"e2e-20k", []string{"e2e20kp99", "e2e20kp999", "e2e20krate"}},
	{"e2e-half", []string{"e2ehalfp99", "e2ehalfrate"}},
}

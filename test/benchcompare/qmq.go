package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// qmqSystem is a three-node broker group: the commands of
// docs/benchmarks.md "Commands" (b), on free ports of 127.0.0.1. The
// measurements run qmqctl bench.
type qmqSystem struct {
	qmqd, qmqctl string // binaries
	ps           *procs
	log          *os.File // client output
	nodes        []*qmqNode
	server       string // every node's client address
	seq          int    // for fresh subjects
}

type qmqNode struct {
	id, data, listen, raft, http string
	p                            *proc
}

func (q *qmqSystem) name() string { return "qmq" }

func (q *qmqSystem) start(ctx context.Context, dir string) error {
	ports, err := freePorts(9)
	if err != nil {
		return err
	}
	q.nodes = nil
	var addrs []string
	for i := range 3 {
		addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
		n := &qmqNode{id: fmt.Sprintf("n%d", i+1), data: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			listen: addr(ports[3*i]), raft: addr(ports[3*i+1]), http: addr(ports[3*i+2])}
		q.nodes = append(q.nodes, n)
		addrs = append(addrs, n.listen)
	}
	q.server = strings.Join(addrs, ",")
	for i, n := range q.nodes {
		args := []string{"broker", "--id", n.id, "--group", "g1", "--data", n.data, "--listen", n.listen, "--raft", n.raft, "--http", n.http}
		if i == 0 {
			args = append(args, "--bootstrap")
		}
		if n.p, err = q.ps.start("qmqd "+n.id, filepath.Join(dir, n.id+".log"), q.qmqd, args...); err != nil {
			return err
		}
		if err := waitFor(ctx, 20*time.Second, n.id+" answers /status", func() error {
			st, err := q.status(n)
			if err == nil && i == 0 && st.State != "Leader" {
				return fmt.Errorf("%s is %s", n.id, st.State)
			}
			return err
		}); err != nil {
			return err
		}
		if i > 0 {
			if err := waitFor(ctx, 20*time.Second, "qmqctl join "+n.id, func() error {
				_, err := run(ctx, q.log, q.qmqctl, "--server", q.nodes[0].listen, "join", "--group", "g1", "--id", n.id, "--raft", n.raft, "--addr", n.listen)
				return err
			}); err != nil {
				return err
			}
		}
	}
	return waitFor(ctx, 30*time.Second, "the qmq group to agree on a leader of 3 members", func() error {
		leader := ""
		for _, n := range q.nodes {
			st, err := q.status(n)
			if err != nil {
				return err
			}
			if st.Leader == "" || len(st.Members) != 3 || (leader != "" && st.Leader != leader) {
				return fmt.Errorf("%s: leader %q, %d members", n.id, st.Leader, len(st.Members))
			}
			leader = st.Leader
		}
		return nil
	})
}

// qmqStatus is what the harness reads of a node's /status.
type qmqStatus struct {
	State   string            `json:"state"`
	Leader  string            `json:"leader"`
	Members []json.RawMessage `json:"members"`
}

func (q *qmqSystem) status(n *qmqNode) (*qmqStatus, error) {
	if done, err := n.p.exited(); done {
		return nil, fmt.Errorf("qmqd %s exited: %v", n.id, err)
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + n.http + "/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st qmqStatus
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s /status: %s", n.id, resp.Status)
	}
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

func (q *qmqSystem) stop() {
	for _, n := range q.nodes {
		if n.p != nil {
			q.ps.stop(n.p, 10*time.Second)
		}
	}
}

func (q *qmqSystem) pids() []int {
	var out []int
	for _, n := range q.nodes {
		out = append(out, n.p.pid())
	}
	return out
}

func (q *qmqSystem) dataDirs() []string {
	var out []string
	for _, n := range q.nodes {
		out = append(out, n.data)
	}
	return out
}

func (q *qmqSystem) subject(what string) string {
	q.seq++
	return fmt.Sprintf("cmp-%s-%d", what, q.seq)
}

// benchJSON is what the harness reads of `qmqctl bench … --json`.
type benchJSON struct {
	Messages int64   `json:"messages"`
	Failed   int64   `json:"failed"`
	MsgsPerS float64 `json:"msgs_per_s"`
	Latency  struct {
		P50 float64 `json:"p50_ms"`
	} `json:"latency"`
	Received int64 `json:"received"`
	E2E      *struct {
		P50  float64 `json:"p50_ms"`
		P99  float64 `json:"p99_ms"`
		P999 float64 `json:"p99_9_ms"`
		Max  float64 `json:"max_ms"`
	} `json:"e2e_latency"`
	Note string `json:"note"`
}

func (q *qmqSystem) bench(ctx context.Context, args ...string) (*benchJSON, error) {
	out, err := run(ctx, q.log, q.qmqctl, append([]string{"--server", q.server, "bench"}, append(args, "--json", "--no-progress")...)...)
	if err != nil {
		return nil, err
	}
	var b benchJSON
	if err := json.Unmarshal(out, &b); err != nil {
		return nil, fmt.Errorf("qmqctl bench %v printed %q: %w", args, out, err)
	}
	if b.Failed > 0 {
		return nil, fmt.Errorf("qmqctl bench %v: %d sends failed", args, b.Failed)
	}
	return &b, nil
}

func (q *qmqSystem) asyncPublish(ctx context.Context, size, count int) (float64, error) {
	b, err := q.bench(ctx, "produce", "--subject", q.subject("async"), "--size", strconv.Itoa(size), "--count", strconv.Itoa(count), "--inflight", "1000")
	if err != nil {
		return 0, err
	}
	return b.MsgsPerS, nil
}

func (q *qmqSystem) syncPublish(ctx context.Context, size int, d time.Duration, _ int) (float64, float64, error) {
	b, err := q.bench(ctx, "produce", "--subject", q.subject("sync"), "--size", strconv.Itoa(size), "--duration", d.String(), "--inflight", "1")
	if err != nil {
		return 0, 0, err
	}
	return b.MsgsPerS, b.Latency.P50, nil
}

func (q *qmqSystem) drain(ctx context.Context, size, count int) (float64, error) {
	subject := q.subject("drain")
	if _, err := q.bench(ctx, "produce", "--subject", subject, "--size", strconv.Itoa(size), "--count", strconv.Itoa(count), "--producers", "4"); err != nil {
		return 0, err
	}
	b, err := q.bench(ctx, "consume", "--subject", subject, "--group", "drain", "--count", strconv.Itoa(count), "--idle", "5s")
	if err != nil {
		return 0, err
	}
	if b.Messages != int64(count) {
		return 0, fmt.Errorf("qmq drain: %d of %d messages consumed (%s)", b.Messages, count, b.Note)
	}
	return b.MsgsPerS, nil
}

func (q *qmqSystem) e2e(ctx context.Context, size, rate int, d time.Duration) (e2eFigures, error) {
	b, err := q.bench(ctx, "produce", "--subject", q.subject("e2e"), "--size", strconv.Itoa(size), "--rate", strconv.Itoa(rate),
		"--duration", d.String(), "--inflight", "1000", "--consume", "e2e", "--consume-wait", "2s")
	if err != nil {
		return e2eFigures{}, err
	}
	f := e2eFigures{asked: float64(rate), achieved: b.MsgsPerS, sent: b.Messages, received: b.Received}
	if b.E2E != nil {
		f.p50, f.p99, f.p999, f.max = b.E2E.P50, b.E2E.P99, b.E2E.P999, b.E2E.Max
	}
	return f, nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsSystem is a three-server NATS JetStream cluster on 127.0.0.1, file
// storage fsynced on every write (sync_interval: always); every stream
// it measures has three replicas. The throughput figures come from
// `nats bench`, the fixed-rate ones from natsE2E (nats.go).
type natsSystem struct {
	server, cli string // nats-server and nats binaries
	ps          *procs
	log         *os.File
	nodes       []*natsNode
	urls        string
	nc          *nats.Conn
	js          jetstream.JetStream
	seq         int
}

type natsNode struct {
	name, data  string
	client, clu int // ports
	p           *proc
}

func (n *natsSystem) name() string { return "NATS" }

// natsConfig is one server's configuration file.
func natsConfig(name, storeDir string, client, cluster int, routes []int) string {
	var r []string
	for _, p := range routes {
		r = append(r, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	return fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: bench
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, name, client, storeDir, cluster, strings.Join(r, ", "))
}

func (n *natsSystem) start(ctx context.Context, dir string) error {
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	n.nodes = nil
	routes := []int{ports[1], ports[3], ports[5]}
	var urls []string
	for i := range 3 {
		nd := &natsNode{name: fmt.Sprintf("n%d", i+1), data: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), client: ports[2*i], clu: ports[2*i+1]}
		n.nodes = append(n.nodes, nd)
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", nd.client))
	}
	n.urls = strings.Join(urls, ",")
	for _, nd := range n.nodes {
		conf := filepath.Join(dir, nd.name+".conf")
		if err := os.WriteFile(conf, []byte(natsConfig(nd.name, nd.data, nd.client, nd.clu, routes)), 0o644); err != nil {
			return err
		}
		if nd.p, err = n.ps.start("nats-server "+nd.name, filepath.Join(dir, nd.name+".log"), n.server, "-c", conf); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, 20*time.Second, "a connection to NATS", func() error {
		for _, nd := range n.nodes {
			if done, err := nd.p.exited(); done {
				return fmt.Errorf("nats-server %s exited: %v", nd.name, err)
			}
		}
		nc, err := nats.Connect(n.urls, nats.Name("bench-compare"))
		if err != nil {
			return err
		}
		n.nc = nc
		return nil
	}); err != nil {
		return err
	}
	if n.js, err = jetstream.New(n.nc); err != nil {
		return err
	}
	// JetStream answers once its meta group has a leader.
	return waitFor(ctx, 30*time.Second, "JetStream to create a stream of 3 replicas", func() error {
		_, err := n.stream(ctx, "READY")
		return err
	})
}

// stream creates a stream of three replicas on file storage, for the
// subjects NAME.>.
func (n *natsSystem) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return n.js.CreateStream(cctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"},
		Storage: jetstream.FileStorage, Replicas: 3})
}

// fresh creates a new stream for one measurement and returns its name and
// a subject in it.
func (n *natsSystem) fresh(ctx context.Context, what string) (string, string, error) {
	n.seq++
	name := fmt.Sprintf("CMP_%s_%d", strings.ToUpper(what), n.seq)
	if _, err := n.stream(ctx, name); err != nil {
		return "", "", err
	}
	return name, strings.ToLower(name) + ".x", nil
}

func (n *natsSystem) stop() {
	if n.nc != nil {
		n.nc.Close()
		n.nc = nil
	}
	for _, nd := range n.nodes {
		if nd.p != nil {
			n.ps.stop(nd.p, 10*time.Second)
		}
	}
}

func (n *natsSystem) pids() []int {
	var out []int
	for _, nd := range n.nodes {
		out = append(out, nd.p.pid())
	}
	return out
}

func (n *natsSystem) dataDirs() []string {
	var out []string
	for _, nd := range n.nodes {
		out = append(out, nd.data)
	}
	return out
}

var (
	natsRate = regexp.MustCompile(`stats: ([0-9,.]+) msgs/sec`)
	natsP50  = regexp.MustCompile(`P50: ([0-9,.]+)us`)
)

// parseNatsBench reads msgs/s, and the median latency in ms if printed,
// from `nats bench`'s summary line.
func parseNatsBench(out string) (rate, p50 float64, err error) {
	m := natsRate.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("no msgs/sec in nats bench's output: %q", out)
	}
	if rate, err = strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64); err != nil {
		return 0, 0, err
	}
	if m := natsP50.FindStringSubmatch(out); m != nil {
		us, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
		if err != nil {
			return 0, 0, err
		}
		p50 = us / 1000
	}
	return rate, p50, nil
}

func (n *natsSystem) bench(ctx context.Context, args ...string) (float64, float64, error) {
	out, err := run(ctx, n.log, n.cli, append([]string{"--server", n.urls, "bench"}, append(args, "--no-progress")...)...)
	if err != nil {
		return 0, 0, err
	}
	return parseNatsBench(string(out))
}

func (n *natsSystem) asyncPublish(ctx context.Context, size, count int) (float64, error) {
	stream, subject, err := n.fresh(ctx, "async")
	if err != nil {
		return 0, err
	}
	rate, _, err := n.bench(ctx, "js", "pub", "async", subject, "--stream", stream, "--size", strconv.Itoa(size),
		"--msgs", strconv.Itoa(count), "--batch", "1000")
	return rate, err
}

func (n *natsSystem) syncPublish(ctx context.Context, size int, _ time.Duration, count int) (float64, float64, error) {
	stream, subject, err := n.fresh(ctx, "sync")
	if err != nil {
		return 0, 0, err
	}
	return n.bench(ctx, "js", "pub", "sync", subject, "--stream", stream, "--size", strconv.Itoa(size), "--msgs", strconv.Itoa(count))
}

func (n *natsSystem) drain(ctx context.Context, size, count int) (float64, error) {
	stream, subject, err := n.fresh(ctx, "drain")
	if err != nil {
		return 0, err
	}
	if _, _, err := n.bench(ctx, "js", "pub", "async", subject, "--stream", stream, "--size", strconv.Itoa(size),
		"--msgs", strconv.Itoa(count), "--batch", "1000", "--clients", "4"); err != nil {
		return 0, err
	}
	if _, err := n.consumer(ctx, stream, "drain"); err != nil {
		return 0, err
	}
	rate, _, err := n.bench(ctx, "js", "consume", "--stream", stream, "--consumer", "drain", "--msgs", strconv.Itoa(count), "--acks", "explicit")
	return rate, err
}

func (n *natsSystem) e2e(ctx context.Context, size, rate int, d time.Duration) (e2eFigures, error) {
	stream, subject, err := n.fresh(ctx, "e2e")
	if err != nil {
		return e2eFigures{}, err
	}
	cons, err := n.consumer(ctx, stream, "e2e")
	if err != nil {
		return e2eFigures{}, err
	}
	return natsE2E(ctx, n.log, n.nc, cons, stream, subject, size, rate, d)
}

// consumer creates a durable pull consumer of the stream from its first
// message, with explicit acks, and waits until it has a leader: a pull
// sent before then can go unanswered until it expires.
func (n *natsSystem) consumer(ctx context.Context, stream, name string) (jetstream.Consumer, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The same windows as qmq's consumer: up to 10,000 unacked (a qmq
	// consumer's MaxUnacked) where NATS's default is 1,000.
	cons, err := n.js.CreateOrUpdateConsumer(cctx, stream, jetstream.ConsumerConfig{Durable: name,
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy, MaxAckPending: 10000})
	if err != nil {
		return nil, err
	}
	return cons, waitFor(ctx, 20*time.Second, "the leader of NATS consumer "+name, func() error {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		info, err := cons.Info(ictx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("consumer %s of %s has no leader yet", name, stream)
		}
		return nil
	})
}

//go:build figures

package test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/netns"
)

// The figures across hosts of docs/reliability.md ("Across hosts") and
// docs/scaling.md ("Measured across hosts"), measured by
// TestFiguresAcrossHosts, built only with the tag figures (a measurement
// of several minutes, not a check: make test and make ci leave it out):
//
//	go test -tags figures ./test -run '^TestFiguresAcrossHosts$' -v -timeout 60m
//
// QMQ_HOSTS_FIGURES_ROUNDS sets how many alternated rounds (default 3);
// each figure is the median of its rounds' values.

// benchResult is what the figures read of `qmqctl bench produce --json`.
type benchResult struct {
	Messages int64   `json:"messages"`
	Failed   int64   `json:"failed"`
	MsgsPerS float64 `json:"msgs_per_s"`
	Latency  struct {
		P50 float64 `json:"p50_ms"`
		P99 float64 `json:"p99_ms"`
	} `json:"latency"`
}

// bench runs qmqctl bench produce against servers for 5 s with extra
// flags and returns its summary; it fails the test if a send failed.
func bench(t *testing.T, c *Cluster, servers string, extra ...string) benchResult {
	t.Helper()
	args := append([]string{"--server", servers, "bench", "produce", "--size", "128", "--count", "100000000",
		"--duration", "5s", "--no-progress", "--json"}, extra...)
	out, err := c.Ctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	var r benchResult
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &r); err != nil {
		t.Fatalf("qmqctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	if r.Failed > 0 || r.Messages == 0 {
		t.Fatalf("qmqctl %s: %d sent, %d failed", strings.Join(args, " "), r.Messages, r.Failed)
	}
	return r
}

// figures collects each figure's values over the rounds.
type figures struct {
	order []string
	vals  map[string][]float64
}

func (f *figures) add(name string, v float64) {
	if f.vals == nil {
		f.vals = map[string][]float64{}
	}
	if _, ok := f.vals[name]; !ok {
		f.order = append(f.order, name)
	}
	f.vals[name] = append(f.vals[name], v)
}

func (f *figures) String() string {
	var b strings.Builder
	for _, name := range f.order {
		vs := slices.Clone(f.vals[name])
		slices.Sort(vs)
		fmt.Fprintf(&b, "%-48s median %10.1f  [%s]\n", name, vs[len(vs)/2], strings.Trim(fmt.Sprint(vs), "[]"))
	}
	return b.String()
}

// The settings the figures compare: loopback, and three-host groups on
// links of a round trip of 0 (the switch alone), 1 and 5 ms, without loss
// or jitter.
var figureRTTs = []struct {
	name string
	rtt  time.Duration
	host bool
}{{"loopback", 0, false}, {"rtt=0", 0, true}, {"rtt=1ms", time.Millisecond, true}, {"rtt=5ms", 5 * time.Millisecond, true}}

func TestFiguresAcrossHosts(t *testing.T) {
	rounds := 3
	if s := os.Getenv("QMQ_HOSTS_FIGURES_ROUNDS"); s != "" {
		var err error
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			t.Fatalf("QMQ_HOSTS_FIGURES_ROUNDS=%q: want a count", s)
		}
	}
	var f figures
	for r := range rounds {
		for _, s := range figureRTTs {
			t.Run(fmt.Sprintf("round%d/%s", r+1, s.name), func(t *testing.T) {
				c := NewCluster(t, "g1", "--election-timeout", "500ms")
				var net *netns.Network
				if s.host {
					net = newHostNetwork(t, uint64(r))
					net.SetLinks(netns.Link{Delay: s.rtt / 2})
					c.UseHosts(net)
				}
				c.Form("", "a", "b", "c")
				async := bench(t, c, c.ClientAddrs(), "--inflight", "1000", "--subject", "async")
				lone := bench(t, c, c.ClientAddrs(), "--inflight", "1", "--batch", "1", "--subject", "lone")
				f.add(s.name+" async 128 B, 1000 in flight (msgs/s)", async.MsgsPerS)
				f.add(s.name+" lone send p50 (ms)", lone.Latency.P50)
				f.add(s.name+" lone send p99 (ms)", lone.Latency.P99)
				if s.host && s.rtt > 0 {
					elected, acked := failovers(t, net, c, 3)
					for i := range elected {
						f.add(s.name+" leader's host cut → new leader (ms)", float64(elected[i].Milliseconds()))
						f.add(s.name+" leader's host cut → first send acked (ms)", float64(acked[i].Milliseconds()))
					}
				}
				t.Logf("switch: %+v", statsOf(net))
			})
		}
		for _, groups := range []int{1, 2} {
			t.Run(fmt.Sprintf("round%d/groups=%d", r+1, groups), func(t *testing.T) {
				net := newHostNetwork(t, uint64(r))
				net.SetLinks(netns.Link{Delay: 500 * time.Microsecond})
				meta := NewMetaGroup(t, "--election-timeout", "500ms")
				meta.UseHosts(net)
				meta.Form("", "m1", "m2", "m3")
				var c *Cluster
				for g := range groups {
					c = NewCluster(t, fmt.Sprintf("g%d", g+1), "--meta", meta.ClientAddrs(), "--election-timeout", "500ms")
					c.UseHosts(net)
					c.Form(meta.ClientAddrs(), c.Group+"a", c.Group+"b", c.Group+"c")
				}
				res := bench(t, c, meta.ClientAddrs(), "--inflight", "1000", "--producers", "4", "--subjects", "4",
					"--subject", fmt.Sprintf("scale%d", groups))
				f.add(fmt.Sprintf("groups=%d rtt=1ms, 4 producers × 1000 in flight (msgs/s)", groups), res.MsgsPerS)
			})
		}
	}
	t.Logf("figures across hosts, %d alternated rounds (values in round order):\n%s", rounds, f.String())
}

func statsOf(net *netns.Network) netns.Stats {
	if net == nil {
		return netns.Stats{}
	}
	return net.Switch().Stats()
}

// failovers cuts the leader's host off n times and returns, for each, the
// time from the cut until a survivor leads and until the first send is
// acknowledged (Chaos.awaitFailover), restoring the host and healing the
// group after each.
func failovers(t *testing.T, net *netns.Network, c *Cluster, n int) (elected, acked []time.Duration) {
	ch := NewChaos(t, 1, nil, c)
	for range n {
		l, term := ch.leader(c)
		at := time.Now()
		net.Cut(l.Host, true)
		e, a := ch.awaitFailover(c, l, term, at)
		elected, acked = append(elected, e), append(acked, a)
		net.Cut(l.Host, false)
		ch.heal(c)
	}
	return elected, acked
}

package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/hashicorp/go-hclog"
	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/console"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// benchCount reads a count from the environment, def when unset.
func benchCount(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a count", name, s)
	}
	return n
}

// hotSubjects is how many subjects hold the consumer groups (4 unless
// QMQ_BENCH_GROUP_SUBJECTS says): a subject has at most 4,096
// (limits.MaxConsumerGroupsPerSubject).
var hotSubjects = 4

// hot is the subject of consumer group i: hot-0, hot-1, ...
func hot(i int) string { return fmt.Sprint("hot-", i%hotSubjects) }

// loadCluster is a metaserver and a one-node broker group g1 holding
// QMQ_BENCH_SUBJECTS subjects (default 1,000): the hot-N sent 100
// messages of 128 B each, the others one (every odd-numbered one delayed
// by 1 to 500 hours); and QMQ_BENCH_GROUPS consumer groups (default
// 1,000; the dead letters' group among them) spread evenly over the
// hot-N, each created by a pull of one message; the group "dlq" of hot-0
// holds 100 dead letters. It returns a function that serves a new console
// of the cluster over httptest (the caller closes it).
func loadCluster(b *testing.B) func() *httptest.Server {
	subjects, groups := benchCount(b, "QMQ_BENCH_SUBJECTS", 1_000), benchCount(b, "QMQ_BENCH_GROUPS", 1_000)
	hotSubjects = benchCount(b, "QMQ_BENCH_GROUP_SUBJECTS", 4)
	m := testcluster.Meta(b, nil)
	testcluster.Broker(b, testcluster.Registered("g1", m.ClientAddr()))
	a, err := admin.New(m.ClientAddr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	poll.Until(b, 30*time.Second, "g1 registered with a leader", func() bool {
		c, err := a.Cluster(context.Background())
		return err == nil && len(c.BrokerGroups) == 1 && c.BrokerGroups[0].Leader != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	msgs := make(chan *qmq.Message)
	sent := make(chan error, 32)
	for range 32 { // each send to a new subject creates its route: in parallel, bounded
		go func() {
			var err error
			for msg := range msgs {
				if err == nil {
					err = p.SendMessage(ctx, msg)
				}
			}
			sent <- err
		}()
	}
	for i := range hotSubjects * 100 {
		msg := p.GenerateMessage(hot(i))
		msg.SetBody(make([]byte, 128))
		msgs <- msg
	}
	for i := range subjects - hotSubjects {
		msg := p.GenerateMessage(fmt.Sprintf("subject-%05d", i))
		msg.SetBody(make([]byte, 128))
		if i%2 == 1 {
			msg.SetDelay(time.Duration(i%500+1) * time.Hour)
		}
		msgs <- msg
	}
	close(msgs)
	for range 32 {
		if err := <-sent; err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d subjects sent to in %v", subjects, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	deadLettersB(b, ctx, a, m.ClientAddr(), hot(0), "dlq", 100)
	work := make(chan int)
	errs := make(chan error, 32)
	for range 32 {
		go func() {
			var err error
			for i := range work {
				if err != nil {
					continue
				}
				err = pullOnce(ctx, m.ClientAddr(), hot(i), fmt.Sprintf("group-%05d", i))
			}
			errs <- err
		}()
	}
	for i := range groups - 1 {
		work <- i
	}
	close(work)
	for range 32 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d consumer groups pulled from in %v", groups, time.Since(start).Round(time.Millisecond))

	return func() *httptest.Server {
		h, err := console.New(console.Config{Servers: []string{m.ClientAddr()}, Logger: hclog.NewNullLogger()})
		if err != nil {
			b.Fatal(err)
		}
		return httptest.NewServer(h)
	}
}

// pullOnce creates group of subject by a pull of one message from the earliest.
func pullOnce(ctx context.Context, servers, subject, group string) error {
	c, err := qmq.NewPuller(servers, subject, group, qmq.StartAt(qmq.Earliest))
	if err != nil {
		return err
	}
	defer c.Close()
	msgs, err := c.Pull(ctx, 1, 5*time.Second)
	if err == nil && len(msgs) == 0 {
		err = fmt.Errorf("group %s: no message pulled", group)
	}
	return err
}

// deadLettersB makes n messages of subject dead letters of group: one
// delivery allowed, each pulled and nacked.
func deadLettersB(b *testing.B, ctx context.Context, a *admin.Client, servers, subject, group string, n int) {
	one := uint32(1)
	if _, err := a.SetConsumerGroup(ctx, subject, group, admin.ConsumerGroupChanges{MaxDeliveries: &one, Start: 1}); err != nil {
		b.Fatal(err)
	}
	c, err := qmq.NewPuller(servers, subject, group, qmq.StartAt(qmq.Earliest))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for got := 0; got < n; {
		msgs, err := c.Pull(ctx, n-got, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Nack(ctx, nil, msgs...); err != nil {
			b.Fatal(err)
		}
		got += len(msgs)
	}
	poll.Until(b, 30*time.Second, "the dead letters", func() bool {
		v, err := a.ConsumerGroup(context.Background(), subject, group)
		return err == nil && v.Total.DeadLetters == n
	})
}

// rendered is run in every new document: it records in window.__inserted
// the time (ms since navigation start) at which #main first holds a table
// or an error, with the rows then, and in window.__rendered the time of
// the second animation frame after it: the table styled, laid out and
// painted once.
const rendered = `document.addEventListener("DOMContentLoaded", () => {
  const m = document.getElementById("main");
  const check = () => {
    if (window.__inserted === undefined && m.querySelector("table, #error")) {
      window.__inserted = performance.now();
      window.__rows = m.querySelectorAll("tr").length;
      window.__error = m.querySelector("#error") ? m.textContent : "";
      requestAnimationFrame(() => requestAnimationFrame(() => { window.__rendered = performance.now(); }));
    }
  };
  new MutationObserver(check).observe(m, { childList: true, subtree: true });
  check();
});`

// BenchmarkPageLoad loads each page of the console in headless Chromium,
// a fresh navigation per op, against the cluster of loadCluster, and
// reports the time from navigation start until the page's table is
// painted (median-ms, max-ms: two animation frames after it is in the
// document; awaited, not slept for), until it is in the document
// (dom-median-ms) and its rows. The
// first op of page/cluster/first is the first look at a new console, whose
// history has no point yet: its answer samples every consumer group of the
// cluster; later looks return the points kept (sampled every 10 s, on the
// console's own goroutine). api/* GETs the JSON endpoint behind each page
// over plain HTTP (api/groups/all: every group of the subject, unpaged);
// api/history/first a new console's first history. Only
// under -bench:
//
//	QMQ_BENCH_SUBJECTS=10000 QMQ_BENCH_GROUPS=10000 go test ./console -run '^$' -bench PageLoad -benchtime 5x -timeout 60m
//
// QMQ_BENCH_SUBJECTS, QMQ_BENCH_GROUPS and QMQ_BENCH_GROUP_SUBJECTS set the
// counts (default 1,000, 1,000 and 4; docs/benchmarks.md's figures are of
// 10,000, 10,000 and 4, and of 10,000, 4,096 and 1).
func BenchmarkPageLoad(b *testing.B) {
	path, err := exec.LookPath("chromium")
	if err != nil {
		b.Fatal("chromium is not on PATH: make chromium installs it")
	}
	newConsole := loadCluster(b)
	srv := newConsole()
	defer srv.Close()

	ctx := startChromium(b, path)
	if err := chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(rendered).Do(ctx)
		return err
	})); err != nil {
		b.Fatal(err)
	}
	loads := 0
	load := func(b *testing.B, hash string) (inserted, painted time.Duration, rows int) {
		var got struct {
			Inserted float64 `json:"inserted"`
			MS       float64 `json:"ms"`
			Rows     int     `json:"rows"`
			Error    string  `json:"error"`
		}
		tctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
		defer cancelT()
		loads++
		// A new query string each time: a new document, not a hash change.
		err := chromedp.Run(tctx,
			chromedp.Navigate(fmt.Sprintf("%s/?load=%d%s", srv.URL, loads, hash)),
			chromedp.Poll(`window.__rendered !== undefined && {inserted: window.__inserted, ms: window.__rendered, rows: window.__rows, error: window.__error}`,
				&got, chromedp.WithPollingInterval(5*time.Millisecond)))
		if err != nil {
			b.Fatalf("page %s: %v", hash, err)
		}
		if got.Error != "" {
			b.Fatalf("page %s shows an error: %.300s", hash, strings.TrimSpace(got.Error))
		}
		ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
		return ms(got.Inserted), ms(got.MS), got.Rows
	}
	first := time.Duration(-1) // kept across the calls of the function (-benchtime Nx calls it with 1, then N)
	b.Run("page/cluster/first", func(b *testing.B) {
		var samples []time.Duration
		for range b.N {
			_, d, _ := load(b, "#cluster")
			if first < 0 {
				first = d
			}
			samples = append(samples, d)
		}
		b.ReportMetric(float64(first.Microseconds())/1e3, "first-ms")
		reportMedian(b, samples)
	})

	pages := []struct{ name, hash, api string }{
		{"cluster", "#cluster", "cluster"},
		{"subjects", "#subjects", "subjects?offset=0&limit=100"},
		{"groups", "#groups?subject=" + hot(1), "subjects/" + hot(1) + "/consumer-groups?q=&offset=0&limit=100"},
		{"dead", "#dead?subject=hot-0&group=dlq", "subjects/hot-0/consumer-groups/dlq/dead-letters?offset=0&limit=100"},
		{"delays", "#delays", "delays"},
	}
	for _, p := range pages {
		b.Run("page/"+p.name, func(b *testing.B) {
			var samples, dom []time.Duration
			var rows int
			for range b.N {
				var d, in time.Duration
				in, d, rows = load(b, p.hash)
				samples, dom = append(samples, d), append(dom, in)
			}
			reportMedian(b, samples)
			slices.Sort(dom)
			b.ReportMetric(float64(dom[len(dom)/2].Microseconds())/1e3, "dom-median-ms")
			b.ReportMetric(float64(rows), "rows")
		})
	}

	get := func(b *testing.B, srv *httptest.Server, path string) (time.Duration, int) {
		t0 := time.Now()
		res, err := http.Get(srv.URL + "/api/v1/" + path)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		d := time.Since(t0)
		if err != nil || res.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %d, %v: %.300s", path, res.StatusCode, err, body)
		}
		return d, len(body)
	}
	apis := append(pages, struct{ name, hash, api string }{"groups/all", "", "subjects/" + hot(1) + "/consumer-groups"},
		struct{ name, hash, api string }{"history", "", "history"})
	for _, p := range apis {
		b.Run("api/"+p.name, func(b *testing.B) {
			var size int
			var samples []time.Duration
			for range b.N {
				var d time.Duration
				d, size = get(b, srv, p.api)
				samples = append(samples, d)
			}
			reportMedian(b, samples)
			b.ReportMetric(float64(size), "bytes")
		})
	}
	b.Run("api/history/first", func(b *testing.B) {
		var samples []time.Duration
		for range b.N {
			fresh := newConsole()
			d, _ := get(b, fresh, "history")
			fresh.Close()
			samples = append(samples, d)
		}
		reportMedian(b, samples)
	})
}

// reportMedian reports the median and the largest of samples, in ms.
func reportMedian(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1e3, "median-ms")
	b.ReportMetric(float64(samples[len(samples)-1].Microseconds())/1e3, "max-ms")
}

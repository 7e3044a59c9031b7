package fsm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
	"golang.org/x/sys/unix"
)

// The store of BenchmarkMessageIndex: QMQ_BENCH_MESSAGES messages (default
// 1,000,000; the figures of docs/benchmarks.md are of 10,000,000) of 128 B
// bodies, all of subject "day", appended through ApplyBatch in Appends of
// 1,000 whose leader stamps spread evenly over 24 hours. Message i has id
// m<i>, the tag "rare" if i%100 == 0 (else "common") and the key
// k<i%(n/10)>: every key ten times over the day, 2.4 hours apart.
const (
	idxBenchSubject = "day"
	idxBenchBatch   = 1000
	idxBenchDay     = int64(24 * 3_600_000)
	idxBenchT0      = int64(1_790_000_000_000) // the day's first stamp, Unix ms
)

func idxBenchMessages(b *testing.B) int {
	n := 1_000_000
	if s := os.Getenv("QMQ_BENCH_MESSAGES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 10*idxBenchBatch {
			b.Fatalf("QMQ_BENCH_MESSAGES=%q: want a count of at least %d", s, 10*idxBenchBatch)
		}
		n = v
	}
	return n - n%idxBenchBatch
}

// idxBenchStamp is the leader's stamp of batch i of batches.
func idxBenchStamp(i, batches int) int64 {
	return idxBenchT0 + int64(i)*idxBenchDay/int64(batches)
}

// idxBenchEntry is the Raft entry (index i+1) of batch i.
func idxBenchEntry(i, batches, keys int) *raft.Log {
	now := idxBenchStamp(i, batches)
	body := make([]byte, 128)
	msgs := make([]*message.Message, idxBenchBatch)
	for j := range msgs {
		n := i*idxBenchBatch + j
		tag := "common"
		if n%100 == 0 {
			tag = "rare"
		}
		msgs[j] = &message.Message{ID: "m" + strconv.Itoa(n), Subject: idxBenchSubject, CreatedAt: now, Body: body,
			Tags:       []string{tag},
			Properties: []message.Property{{Key: message.KeyProperty, Value: "k" + strconv.Itoa(n%keys)}}}
	}
	return &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: (&Append{Now: now, Messages: msgs}).Encode()}
}

// buildIndexBenchStore applies the store's messages to a fresh FSM, the
// entries encoded on another goroutine (the leader's work), and returns it
// with the message count and the last applied Raft index.
func buildIndexBenchStore(b *testing.B, cfg Config) (*FSM, int, uint64) {
	n := idxBenchMessages(b)
	batches, keys := n/idxBenchBatch, n/10
	f, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	entries := make(chan []*raft.Log, 4)
	go func() {
		defer close(entries)
		for i := 0; i < batches; i += 8 {
			var group []*raft.Log
			for j := i; j < min(i+8, batches); j++ {
				group = append(group, idxBenchEntry(j, batches, keys))
			}
			entries <- group
		}
	}()
	start := time.Now()
	var last uint64
	for group := range entries {
		for k, r := range f.ApplyBatch(group) {
			if ar, ok := r.(*AppendResult); !ok || ar.Messages[idxBenchBatch-1].Status != Appended {
				b.Fatalf("entry %d: %+v", group[k].Index, r)
			}
		}
		last = group[len(group)-1].Index
	}
	if _, _, err := f.writeCheckpoint(); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.Logf("built %d messages (%d batches) in %v: %.0f msgs/s", n, batches, el.Round(time.Millisecond), float64(n)/el.Seconds())
	waitIndexBuilt(b, f, 5*time.Minute)
	return f, n, last
}

// waitIndexBuilt waits until every sealed segment of f's message log is
// indexed, and returns how long that took.
func waitIndexBuilt(b *testing.B, f *FSM, limit time.Duration) time.Duration {
	start := time.Now()
	for !f.store.index.Ready() {
		if time.Since(start) > limit {
			b.Fatalf("index not built after %v", limit)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// evictDir asks the kernel to drop the page cache of every file under dir
// (POSIX_FADV_DONTNEED; the store's files are clean after a flush), so that
// the next read goes to the disk. Only this store's pages are dropped.
func evictDir(b *testing.B, dir string) {
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			return nil
		}
		defer unix.Close(fd)
		if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
			b.Fatalf("fadvise %s: %v", path, err)
		}
		return nil
	})
}

// reportLatencies reports the percentiles of samples, in µs.
func reportLatencies(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	at := func(p float64) float64 {
		i := int(p * float64(len(samples)))
		return float64(samples[min(i, len(samples)-1)].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
	b.ReportMetric(at(0.999), "p99.9-µs")
	b.ReportMetric(float64(samples[len(samples)-1].Nanoseconds())/1e3, "max-µs")
}

// BenchmarkMessageIndex measures lookup by id, queries by time, tag and
// key, and the index's rebuild on open, over the store described above
// (built once, before the sub-benchmarks; its build rate is logged). An op
// is one set of measurements, so run it with -benchtime 1x:
//
//	QMQ_BENCH_MESSAGES=10000000 QMQ_BENCH_LOOKUPS=100000 go test ./fsm -run '^$' -bench MessageIndex -benchtime 1x -timeout 60m -v
//
// find/*: FindMessage of QMQ_BENCH_LOOKUPS (default 20,000) random ids
// present and as many absent, page cache warm; find/*/cold: 1,000 of each,
// the store's files evicted from the page cache before each (not timed).
// query/*: the first page (Limit 100, the default budget) of a one-hour
// window (hour 12) and of the whole day, without a filter, with the tag
// "rare" (1 %) and with one key (10 messages in the day), 200 times each (or as
// many as fit in 10 s, at least 10).
// walk/*: every page of the window, following Next, once. rebuild: the
// store closed, its index/ removed, reopened: the time Open takes and until
// the index is Ready, with lookups (ErrIndexBuilding), queries and an
// Append served meanwhile; it runs last and leaves the store reopened.
func BenchmarkMessageIndex(b *testing.B) {
	cfg := DefaultConfig(b.TempDir())
	f, n, last := buildIndexBenchStore(b, cfg)
	defer func() { f.Close() }()
	dataPath := filepath.Join(cfg.Dir, dataDir)
	st := f.store.index.Stats()
	b.Logf("store: %d messages, message log %d MiB in %d segments, index on disk %d B (%.2f B/msg of sealed segments), in memory %d B (%d active entries)",
		n, dirBytes(filepath.Join(dataPath, messagesDir))>>20, f.store.messages.Log().SegmentCount(),
		st.DiskBytes, float64(st.DiskBytes)/float64(n-st.ActiveEntries), st.MemoryBytes, st.ActiveEntries)

	lookups := 20_000
	if s := os.Getenv("QMQ_BENCH_LOOKUPS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("QMQ_BENCH_LOOKUPS=%q", s)
		}
		lookups = v
	}
	find := func(present, cold bool, count int) func(*testing.B) {
		return func(b *testing.B) {
			rng := rand.New(rand.NewPCG(uint64(count), 7))
			samples := make([]time.Duration, 0, count*b.N)
			for range b.N {
				for range count {
					id, want := "x"+strconv.Itoa(rng.IntN(n)), 0
					if present {
						id, want = "m"+strconv.Itoa(rng.IntN(n)), 1
					}
					if cold {
						b.StopTimer()
						evictDir(b, dataPath)
						b.StartTimer()
					}
					t0 := time.Now()
					got, err := f.FindMessage(id, 0, 0)
					samples = append(samples, time.Since(t0))
					if err != nil || len(got) != want {
						b.Fatalf("FindMessage(%s): %d messages, %v; want %d", id, len(got), err, want)
					}
				}
			}
			reportLatencies(b, samples)
			st := f.store.index.Stats()
			b.ReportMetric(float64(st.DiskBytes), "idx-disk-B")
			b.ReportMetric(float64(st.MemoryBytes), "idx-mem-B")
		}
	}
	b.Run("find/present", find(true, false, lookups))
	b.Run("find/absent", find(false, false, lookups))
	b.Run("find/present/cold", find(true, true, 1000))
	b.Run("find/absent/cold", find(false, true, 1000))

	hour := MessageQuery{Subject: idxBenchSubject, Since: idxBenchT0 + 12*3_600_000, Until: idxBenchT0 + 13*3_600_000, FromSeq: -1, Limit: 100}
	day := MessageQuery{Subject: idxBenchSubject, Since: idxBenchT0, Until: idxBenchT0 + idxBenchDay, FromSeq: -1, Limit: 100}
	key := "k" + strconv.Itoa(12345%(n/10))
	type window struct {
		name string
		q    MessageQuery
	}
	var windows []window
	for _, w := range []window{{"hour", hour}, {"day", day}} {
		windows = append(windows, w)
		tq, kq := w.q, w.q
		tq.Tag, kq.Key = "rare", key
		windows = append(windows, window{w.name + "/tag", tq}, window{w.name + "/key", kq})
	}
	for _, w := range windows {
		b.Run("query/"+w.name, func(b *testing.B) {
			var samples []time.Duration
			var res *MessageQueryResult
			for range b.N {
				// 200 queries, or as many as fit in 10 s (at least 10).
				for start := time.Now(); len(samples) < 200 && (len(samples) < 10 || time.Since(start) < 10*time.Second); {
					t0 := time.Now()
					var err error
					if res, err = f.QueryMessages(w.q); err != nil {
						b.Fatal(err)
					}
					samples = append(samples, time.Since(t0))
				}
			}
			reportLatencies(b, samples)
			b.ReportMetric(float64(len(res.Messages)), "msgs")
			b.ReportMetric(float64(res.Scanned), "scanned")
		})
	}
	for _, w := range windows {
		b.Run("walk/"+w.name, func(b *testing.B) {
			var pages, msgs, scanned int
			for range b.N {
				pages, msgs, scanned = 0, 0, 0
				q := w.q
				for {
					res, err := f.QueryMessages(q)
					if err != nil {
						b.Fatal(err)
					}
					pages++
					msgs += len(res.Messages)
					scanned += res.Scanned
					if res.Next < 0 {
						break
					}
					q.FromSeq = res.Next
				}
			}
			b.ReportMetric(float64(pages), "pages")
			b.ReportMetric(float64(msgs), "msgs")
			b.ReportMetric(float64(scanned), "scanned")
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/walk")
		})
	}

	b.Run("rebuild", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(dataPath, indexDir)); err != nil {
				b.Fatal(err)
			}
			evictDir(b, dataPath) // a node restarted: the segments are not cached
			b.StartTimer()
			t0 := time.Now()
			var err error
			if f, err = Open(cfg); err != nil {
				b.Fatal(err)
			}
			opened := time.Since(t0)
			var building, found, queries, appends int
			for !f.store.index.Ready() {
				if _, err := f.FindMessage("m0", 0, 0); errors.Is(err, logs.ErrIndexBuilding) {
					building++
				} else if err == nil {
					found++ // answered: the segment of m0 was indexed by then
				} else {
					b.Fatal(err)
				}
				if res, err := f.QueryMessages(hour); err != nil || len(res.Messages) != hour.Limit {
					b.Fatalf("query while the index builds: %v", err)
				}
				queries++
				if appends == 0 {
					last++
					now := idxBenchStamp(n/idxBenchBatch, n/idxBenchBatch)
					r := f.ApplyBatch([]*raft.Log{{Index: last, Term: 1, Type: raft.LogCommand,
						Data: (&Append{Now: now, Messages: []*message.Message{{ID: fmt.Sprint("during-", last), Subject: idxBenchSubject, CreatedAt: now, Body: make([]byte, 128)}}}).Encode()}})
					if ar := r[0].(*AppendResult); ar.Messages[0].Status != Appended {
						b.Fatalf("append while the index builds: %+v", ar.Messages[0])
					}
					appends++
				}
				time.Sleep(10 * time.Millisecond) // leave the core to the build
			}
			ready := time.Since(t0)
			if got, err := f.FindMessage("m0", 0, 0); err != nil || len(got) != 1 {
				b.Fatalf("FindMessage(m0) once ready: %d, %v", len(got), err)
			}
			b.ReportMetric(opened.Seconds(), "open-s")
			b.ReportMetric(ready.Seconds(), "ready-s")
			b.ReportMetric(float64(building), "lookups-building")
			b.ReportMetric(float64(found), "lookups-found")
			b.ReportMetric(float64(queries), "queries")
			b.ReportMetric(float64(appends), "appends")
		}
	})
}

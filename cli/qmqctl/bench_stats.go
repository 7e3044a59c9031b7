package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// latencyRecorder keeps every latency sample, so percentiles are exact
// rather than bucketed. Eight bytes a message: a million messages cost
// 8 MB. Samples go into blocks of recorderBlock, never one slice that
// grows: doubling a slice of millions of samples copied tens of megabytes
// under the mutex, and every send's callback waited meanwhile, which a
// long run reported as the brokers' stall. Safe for concurrent use.
type latencyRecorder struct {
	mu     sync.Mutex
	blocks [][]time.Duration // full blocks, the one being filled, then empty ones reserved
	cur    int               // the block being filled
}

// recorderBlock is the samples one block holds (512 KiB).
const recorderBlock = 64 << 10

// newLatencyRecorder returns a recorder with room for capacity samples
// reserved up front (0: none; blocks are added as needed).
func newLatencyRecorder(capacity int) *latencyRecorder {
	r := &latencyRecorder{}
	for range (max(capacity, 0) + recorderBlock - 1) / recorderBlock {
		r.blocks = append(r.blocks, make([]time.Duration, 0, recorderBlock))
	}
	return r
}

func (r *latencyRecorder) add(d time.Duration) {
	r.mu.Lock()
	b := r.block()
	*b = append(*b, d)
	r.mu.Unlock()
}

func (r *latencyRecorder) addAll(ds []time.Duration) {
	r.mu.Lock()
	for len(ds) > 0 {
		b := r.block()
		n := min(len(ds), cap(*b)-len(*b))
		*b = append(*b, ds[:n]...)
		ds = ds[n:]
	}
	r.mu.Unlock()
}

// block returns the block being filled, moving on to the next (added if
// none is reserved) when it is full. r.mu is held.
func (r *latencyRecorder) block() *[]time.Duration {
	for r.cur < len(r.blocks) && len(r.blocks[r.cur]) == cap(r.blocks[r.cur]) {
		r.cur++
	}
	if r.cur == len(r.blocks) {
		r.blocks = append(r.blocks, make([]time.Duration, 0, recorderBlock))
	}
	return &r.blocks[r.cur]
}

// take returns the samples gathered so far and forgets them.
func (r *latencyRecorder) take() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, b := range r.blocks {
		n += len(b)
	}
	out := make([]time.Duration, 0, n)
	for _, b := range r.blocks {
		out = append(out, b...)
	}
	r.blocks, r.cur = nil, 0
	return out
}

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted: the smallest sample with at least p% of the samples at or below
// it. Zero for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	// p/100*n can land a hair above an integer (99.9/100*1000 is
	// 999.0000000000001), which would skip a rank: round such noise away.
	if exact := math.Round(p / 100 * float64(n)); math.Abs(exact-p/100*float64(n)) < 1e-9 {
		rank = int(exact)
	}
	return sorted[min(max(rank, 1), n)-1]
}

// latencySummary is a latency distribution in milliseconds.
type latencySummary struct {
	Samples int     `json:"samples"`
	Min     float64 `json:"min_ms"`
	Mean    float64 `json:"mean_ms"`
	P50     float64 `json:"p50_ms"`
	P90     float64 `json:"p90_ms"`
	P99     float64 `json:"p99_ms"`
	P999    float64 `json:"p99_9_ms"`
	Max     float64 `json:"max_ms"`
}

// summarizeLatencies sorts samples in place and summarises them.
func summarizeLatencies(samples []time.Duration) latencySummary {
	if len(samples) == 0 {
		return latencySummary{}
	}
	slices.Sort(samples)
	var sum float64
	for _, d := range samples {
		sum += float64(d)
	}
	return latencySummary{
		Samples: len(samples),
		Min:     ms(samples[0]),
		Mean:    sum / float64(len(samples)) / float64(time.Millisecond),
		P50:     ms(percentile(samples, 50)),
		P90:     ms(percentile(samples, 90)),
		P99:     ms(percentile(samples, 99)),
		P999:    ms(percentile(samples, 99.9)),
		Max:     ms(samples[len(samples)-1]),
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchSummary is what a bench run prints, as text or as JSON.
type benchSummary struct {
	Mode     string   `json:"mode"` // "produce" or "consume"
	Server   string   `json:"server"`
	Subjects []string `json:"subjects"`
	Group    string   `json:"consumer_group,omitempty"`
	Size     int      `json:"size_bytes,omitempty"` // produce: the body size sent
	Clients  int      `json:"clients"`              // producers, or pullers
	Inflight int      `json:"inflight,omitempty"`   // produce: the window per producer
	Batch    int      `json:"batch,omitempty"`      // produce: SDK batch; consume: pull batch
	Requests int      `json:"requests,omitempty"`   // produce: SDK requests in flight
	Messages int64    `json:"messages"`             // acknowledged (produce) or received and acked (consume)
	Failed   int64    `json:"failed"`               // produce: sends that failed
	Bytes    int64    `json:"bytes"`                // message bodies
	Elapsed  float64  `json:"elapsed_s"`
	MsgsPerS float64  `json:"msgs_per_s"`
	MBPerS   float64  `json:"mb_per_s"` // 10^6 bytes of message body a second
	// Paced runs (produce --rate): the rate asked for; the latest a send
	// left after its slot in the schedule (at most 10 ms: beyond that the
	// schedule slips); the total time it slipped (about Slipped × Rate
	// messages were not sent).
	Rate    int64   `json:"rate,omitempty"`
	MaxLate float64 `json:"max_late_ms,omitempty"`
	Slipped float64 `json:"slipped_s,omitempty"`
	// End to end (produce --consume): the group, its subscriptions per
	// subject, the run's messages it received, older messages it skipped,
	// their latency, and the longest stretch of the run with neither an
	// acknowledgement nor a receipt.
	Consumers int             `json:"consumers,omitempty"`
	Received  int64           `json:"received,omitempty"`
	Stale     int64           `json:"stale,omitempty"`
	E2E       *latencySummary `json:"e2e_latency,omitempty"`
	E2EOf     string          `json:"e2e_latency_of,omitempty"`
	MaxStall  float64         `json:"max_stall_ms,omitempty"`
	// Delayed runs. DeliverIn and DeliverOver (produce): when the messages
	// were due. FiredIn and FiredPerS (produce --await-fired): from the
	// first due time until none was pending. Early (consume): messages
	// received before their delivery time, which must be 0.
	DeliverIn   float64        `json:"deliver_in_s,omitempty"`
	DeliverOver float64        `json:"deliver_over_s,omitempty"`
	FiredIn     float64        `json:"fired_in_s,omitempty"`
	FiredPerS   float64        `json:"fired_per_s,omitempty"`
	Delayed     int64          `json:"delayed,omitempty"`
	Early       int64          `json:"early"`
	Latency     latencySummary `json:"latency"`
	LatencyOf   string         `json:"latency_of"`
	Note        string         `json:"note,omitempty"`
}

// rates fills in the throughput from Messages, Bytes and elapsed.
func (s *benchSummary) rates(elapsed time.Duration) {
	s.Elapsed = elapsed.Seconds()
	if elapsed > 0 {
		s.MsgsPerS = float64(s.Messages) / elapsed.Seconds()
		s.MBPerS = float64(s.Bytes) / 1e6 / elapsed.Seconds()
	}
}

func (s *benchSummary) write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "== qmqctl bench %s (%s)\n", s.Mode, s.Server)
	subjects := strings.Join(s.Subjects, ", ")
	if len(s.Subjects) > 4 {
		subjects = fmt.Sprintf("%s … %s (%d)", s.Subjects[0], s.Subjects[len(s.Subjects)-1], len(s.Subjects))
	}
	fmt.Fprintf(&b, "subjects     %s\n", subjects)
	switch s.Mode {
	case "produce":
		fmt.Fprintf(&b, "producers    %d, each with %d messages in flight (SDK batch %d, %d requests in flight)\n",
			s.Clients, s.Inflight, s.Batch, s.Requests)
		fmt.Fprintf(&b, "message      %d B body\n", s.Size)
		fmt.Fprintf(&b, "sent         %d acknowledged, %d failed\n", s.Messages, s.Failed)
		if s.Rate > 0 {
			fmt.Fprintf(&b, "rate         %d msgs/s asked, %.0f achieved; behind schedule: slipped %.3f s in all (about %.0f messages not sent), a send at most %s ms late otherwise\n",
				s.Rate, s.MsgsPerS, s.Slipped, s.Slipped*float64(s.Rate), fmtMs(s.MaxLate))
		}
		if s.DeliverIn > 0 {
			fmt.Fprintf(&b, "delayed      due from %.3g s after the start, over %.3g s\n", s.DeliverIn, s.DeliverOver)
		}
		if s.FiredIn > 0 {
			fmt.Fprintf(&b, "fired        all %d within %.3f s of the first coming due: %.0f msgs/s\n", s.Messages, s.FiredIn, s.FiredPerS)
		}
	case "consume":
		fmt.Fprintf(&b, "consumers    %s in consumer group %s, pulling up to %d at a time, acking every batch\n",
			plural(s.Clients, "puller"), s.Group, s.Batch)
		fmt.Fprintf(&b, "received     %s, all acknowledged\n", plural(s.Messages, "message"))
		if s.Delayed > 0 || s.Early > 0 {
			fmt.Fprintf(&b, "delayed      %d of them, %d received before their delivery time\n", s.Delayed, s.Early)
		}
	}
	fmt.Fprintf(&b, "elapsed      %.3f s\n", s.Elapsed)
	fmt.Fprintf(&b, "throughput   %.0f msgs/s, %.2f MB/s of bodies (1 MB = 10^6 B)\n", s.MsgsPerS, s.MBPerS)
	writeLatency(&b, "latency     ", s.Latency)
	fmt.Fprintf(&b, "measured     %s\n", s.LatencyOf)
	if s.E2E != nil {
		fmt.Fprintf(&b, "consumed     %d of the %d acknowledged, by consumer group %s (%s a subject); %s skipped\n",
			s.Received, s.Messages, s.Group, plural(s.Consumers, "subscription"), plural(s.Stale, "older message"))
		writeLatency(&b, "e2e latency ", *s.E2E)
		fmt.Fprintf(&b, "e2e measured %s\n", s.E2EOf)
		fmt.Fprintf(&b, "max stall    %s ms with neither an acknowledgement nor a receipt\n", fmtMs(s.MaxStall))
	}
	if s.Note != "" {
		fmt.Fprintf(&b, "note         %s\n", s.Note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtMs prints milliseconds with three significant-ish digits.
func fmtMs(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.3f", v)
	case v < 100:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

// writeLatency writes one summary line of l, after label.
func writeLatency(b *strings.Builder, label string, l latencySummary) {
	if l.Samples == 0 {
		fmt.Fprintf(b, "%s no samples\n", label)
		return
	}
	fmt.Fprintf(b, "%s p50 %s ms  p90 %s ms  p99 %s ms  p99.9 %s ms  max %s ms  (min %s, mean %s; %d samples)\n",
		label, fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max), fmtMs(l.Min), fmtMs(l.Mean), l.Samples)
}

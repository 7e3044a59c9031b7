package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// ramp returns n samples of 1, 2, … n milliseconds.
func ramp(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	for _, tc := range []struct {
		n    int
		p    float64
		want time.Duration
	}{
		{100, 50, 50 * time.Millisecond},
		{100, 90, 90 * time.Millisecond},
		{100, 99, 99 * time.Millisecond},
		{100, 99.9, 100 * time.Millisecond}, // fewer than 1,000 samples: the top one
		{100, 100, 100 * time.Millisecond},
		{100, 0.1, 1 * time.Millisecond},
		{100, 0, 1 * time.Millisecond}, // clamped to the first rank
		{1000, 99.9, 999 * time.Millisecond},
		{1000, 99, 990 * time.Millisecond},
		{1000, 50, 500 * time.Millisecond},
		{10, 50, 5 * time.Millisecond},
		{10, 55, 6 * time.Millisecond}, // ceil(5.5) = 6
		{3, 50, 2 * time.Millisecond},
		{2, 50, 1 * time.Millisecond},
		{1, 50, 1 * time.Millisecond},
		{1, 99.9, 1 * time.Millisecond},
		{100000, 99.9, 99900 * time.Millisecond},
		{100000, 99.99, 99990 * time.Millisecond},
	} {
		if got := percentile(ramp(tc.n), tc.p); got != tc.want {
			t.Errorf("percentile(1..%d ms, %v) = %v, want %v", tc.n, tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile of no samples = %v, want 0", got)
	}
}

func TestSummarizeLatenciesSortsAndSummarises(t *testing.T) {
	s := ramp(1000)
	rand.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	got := summarizeLatencies(s)
	want := latencySummary{Samples: 1000, Min: 1, Mean: 500.5, P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000}
	if got != want {
		t.Errorf("summarizeLatencies = %+v, want %+v", got, want)
	}
	for i := 1; i < len(s); i++ {
		if s[i-1] > s[i] {
			t.Fatalf("samples not sorted in place at %d", i)
		}
	}
	if got := summarizeLatencies(nil); got != (latencySummary{}) {
		t.Errorf("summarizeLatencies(nil) = %+v, want zero", got)
	}
	sub := summarizeLatencies([]time.Duration{1500 * time.Microsecond})
	if sub.P50 != 1.5 || sub.P999 != 1.5 || sub.Min != 1.5 || sub.Max != 1.5 || sub.Mean != 1.5 {
		t.Errorf("one sample of 1.5 ms: %+v", sub)
	}
}

func TestLatencyRecorderConcurrent(t *testing.T) {
	r := newLatencyRecorder(10)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				if i%2 == 0 {
					r.add(time.Duration(g*1000 + i))
				} else {
					r.addAll([]time.Duration{time.Duration(g*1000 + i)})
				}
			}
		}()
	}
	wg.Wait()
	got := r.take()
	if len(got) != 8000 {
		t.Fatalf("took %d samples, want 8000", len(got))
	}
	sum := summarizeLatencies(got)
	if sum.Min != 0 || sum.Max != ms(7999) {
		t.Errorf("min %v max %v, want 0 and %v", sum.Min, sum.Max, ms(7999))
	}
	if again := r.take(); len(again) != 0 {
		t.Errorf("second take returned %d samples, want none", len(again))
	}
}

func TestSummaryRatesAndOutput(t *testing.T) {
	s := &benchSummary{Mode: "produce", Server: "127.0.0.1:1", Subjects: []string{"bench"}, Size: 128,
		Clients: 1, Inflight: 1000, Batch: 1000, Requests: 8, Messages: 50000, Bytes: 50000 * 128,
		Latency: summarizeLatencies(ramp(100)), LatencyOf: "enqueue to ack"}
	s.rates(2 * time.Second)
	if s.MsgsPerS != 25000 || s.MBPerS != 3.2 || s.Elapsed != 2 {
		t.Errorf("rates: %v msgs/s, %v MB/s over %v s; want 25000, 3.2, 2", s.MsgsPerS, s.MBPerS, s.Elapsed)
	}

	var text bytes.Buffer
	if err := s.write(&text, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"25000 msgs/s", "3.20 MB/s", "p50 50.00 ms", "p99 99.00 ms", "p99.9 100.0 ms", "max 100.0 ms", "50000 acknowledged, 0 failed"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, text.String())
		}
	}

	var js bytes.Buffer
	if err := s.write(&js, true); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("JSON summary does not parse: %v\n%s", err, js.String())
	}
	lat, _ := back["latency"].(map[string]any)
	if back["msgs_per_s"] != 25000.0 || back["failed"] != 0.0 || lat["p99_9_ms"] != 100.0 || lat["p50_ms"] != 50.0 {
		t.Errorf("JSON summary: %s", js.String())
	}

	var zero bytes.Buffer
	empty := &benchSummary{Mode: "consume", Subjects: []string{"a", "b", "c", "d", "e"}}
	empty.rates(0)
	if err := empty.write(&zero, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(zero.String(), "no samples") || !strings.Contains(zero.String(), "a … e (5)") {
		t.Errorf("empty summary:\n%s", zero.String())
	}
}

// Samples fill fixed blocks, so a block once written is never copied (a
// growing slice of millions of samples was, under the mutex, stalling
// every callback), and take returns them all in order, across blocks and
// across an addAll that spans them.
func TestLatencyRecorderBlocks(t *testing.T) {
	r := newLatencyRecorder(recorderBlock + 1) // two blocks reserved
	r.add(0)
	first := &r.blocks[0][0]
	n := time.Duration(1)
	for ; n < recorderBlock-3; n++ {
		r.add(n)
	}
	span := make([]time.Duration, 2*recorderBlock+10) // past the reserved blocks
	for i := range span {
		span[i] = n
		n++
	}
	r.addAll(span)
	for range 5 {
		r.add(n)
		n++
	}
	if &r.blocks[0][0] != first {
		t.Fatal("the first block moved: samples were copied")
	}
	got := r.take()
	if len(got) != int(n) {
		t.Fatalf("took %d samples, want %d", len(got), n)
	}
	for i, d := range got {
		if d != time.Duration(i) {
			t.Fatalf("sample %d is %d, want %d", i, d, i)
		}
	}
	if again := r.take(); len(again) != 0 {
		t.Fatalf("a second take returned %d samples", len(again))
	}
}

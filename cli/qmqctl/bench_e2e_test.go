package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/testcluster"
)

func TestBodyStamp(t *testing.T) {
	at := time.Unix(1_800_000_000, 123_456_789)
	b := []byte("0123456789")
	stampBody(b, at)
	if got, ok := bodyStamp(b); !ok || !got.Equal(at) {
		t.Fatalf("bodyStamp = %v, %v; want %v", got, ok, at)
	}
	if string(b[stampSize:]) != "89" {
		t.Errorf("the stamp wrote past its 8 bytes: %q", b)
	}
	if _, ok := bodyStamp(b[:stampSize-1]); ok {
		t.Error("a 7-byte body read as stamped")
	}
	if got, ok := bodyStamp(b[:stampSize]); !ok || !got.Equal(at) {
		t.Errorf("an 8-byte body: %v, %v", got, ok)
	}
}

func TestStallClock(t *testing.T) {
	start := time.Unix(0, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	s := newStallClock(start)
	for _, e := range []int{2, 5, 4, 15, 3, 16} { // out of order, as from several goroutines
		s.event(at(e))
	}
	if got := s.longest(at(20)); got != 10*time.Millisecond {
		t.Errorf("longest gap = %v, want 10ms (5 → 15)", got)
	}
	// A tail longer than any gap counts up to the end.
	if got := s.longest(at(40)); got != 24*time.Millisecond {
		t.Errorf("with a quiet tail, longest = %v, want 24ms (16 → 40)", got)
	}
	// No event at all: the whole run is one stall.
	if got := newStallClock(start).longest(at(7)); got != 7*time.Millisecond {
		t.Errorf("no events: %v, want 7ms", got)
	}
}

// A run with --consume: the consumer gets every message of the run, skips
// the subject's older ones, and reports end-to-end latency and stalls.
func TestBenchProduceConsume(t *testing.T) {
	addr := testcluster.Broker(t, nil).ClientAddr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs bytes.Buffer
	base := produceConfig{server: addr, subjects: []string{"e2e-0", "e2e-1"}, size: 64, inflight: 100, producers: 2,
		batch: 100, requests: 4, timeout: 10 * time.Second, errOut: &errs}
	old := base
	old.count = 50
	if _, err := runProduce(ctx, old); err != nil {
		t.Fatal(err)
	}
	run := base
	run.count, run.consume, run.consumers, run.consumeWait = 2000, "live", 2, 20*time.Second
	sum, err := runProduce(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Messages != 2000 || sum.Received != 2000 || sum.Stale != 50 || sum.E2E == nil || sum.E2E.Samples != 2000 || sum.Note != "" {
		t.Fatalf("produce --consume: %+v (e2e %+v); errors: %s", sum, sum.E2E, errs.String())
	}
	if e := sum.E2E; e.Min <= 0 || e.P50 > e.P99 || e.P99 > e.P999 || e.P999 > e.Max {
		t.Errorf("e2e percentiles out of order: %+v", e)
	}
	if sum.MaxStall <= 0 || sum.MaxStall > sum.Elapsed*1000 {
		t.Errorf("max stall %v ms in a %v s run", sum.MaxStall, sum.Elapsed)
	}
	var text, js bytes.Buffer
	if err := sum.write(&text, false); err != nil || !strings.Contains(text.String(), "e2e latency  p50") || !strings.Contains(text.String(), "max stall") {
		t.Errorf("text summary: %v\n%s", err, text.String())
	}
	if err := sum.write(&js, true); err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil || decoded["e2e_latency"] == nil || decoded["max_stall_ms"] == nil {
		t.Errorf("JSON summary lacks e2e_latency or max_stall_ms: %v\n%s", err, js.String())
	}
}

func TestBenchProduceConsumeRefusesBadValues(t *testing.T) {
	for _, bad := range []produceConfig{
		{size: stampSize - 1, consumers: 1, consumeWait: time.Second},
		{size: stampSize, consumers: 0, consumeWait: time.Second},
		{size: stampSize, consumers: 1, consumeWait: 0},
		{size: stampSize, consumers: 1, consumeWait: time.Second, deliverIn: time.Second},
	} {
		bad.server, bad.subjects, bad.count, bad.inflight, bad.producers, bad.batch, bad.requests, bad.timeout, bad.consume =
			"127.0.0.1:1", []string{"x"}, 1, 1, 1, 1, 1, time.Second, "g"
		if _, err := runProduce(context.Background(), bad); err == nil {
			t.Errorf("runProduce(%+v) accepted a bad --consume run", bad)
		}
	}
	// Exactly 8 bytes is enough for the stamp.
	addr := testcluster.Broker(t, nil).ClientAddr()
	sum, err := runProduce(context.Background(), produceConfig{server: addr, subjects: []string{"eight"}, size: stampSize, count: 10,
		inflight: 10, producers: 1, batch: 10, requests: 1, timeout: 10 * time.Second, consume: "g", consumers: 1, consumeWait: 10 * time.Second,
		errOut: &bytes.Buffer{}})
	if err != nil || sum.Received != 10 {
		t.Fatalf("--size 8 --consume: %v, %+v", err, sum)
	}
}

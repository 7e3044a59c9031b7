package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/testcluster"
)

func TestBenchProduceThenConsume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := testcluster.Broker(t, nil).ClientAddr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subjects := []string{"bench-0", "bench-1"}

	var errs bytes.Buffer
	sum, err := runProduce(ctx, produceConfig{server: addr, subjects: subjects, size: 100, count: 3000,
		inflight: 200, producers: 2, batch: 100, requests: 4, timeout: 10 * time.Second, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Messages != 3000 || sum.Failed != 0 || sum.Bytes != 300000 || sum.Latency.Samples != 3000 {
		t.Fatalf("produce: %+v; errors: %s", sum, errs.String())
	}
	if sum.MsgsPerS <= 0 || sum.Latency.P50 <= 0 || sum.Latency.P50 > sum.Latency.P999 || sum.Latency.P999 > sum.Latency.Max {
		t.Errorf("produce figures look wrong: %+v", sum)
	}

	// One message at a time, for a fixed duration.
	one, err := runProduce(ctx, produceConfig{server: addr, subjects: []string{"single"}, size: 10, duration: 300 * time.Millisecond,
		inflight: 1, producers: 1, batch: 1000, requests: 8, timeout: 10 * time.Second, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if one.Messages == 0 || one.Failed != 0 || one.Elapsed < 0.3 {
		t.Errorf("produce --inflight 1 --duration 300ms: %+v", one)
	}

	got, err := runConsume(ctx, consumeConfig{server: addr, subjects: subjects, group: "g", consumers: 2,
		pullBatch: 250, idle: 500 * time.Millisecond, count: 3000, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if got.Messages != 3000 || got.Bytes != 300000 || got.Latency.Samples != 3000 || got.Note != "" {
		t.Fatalf("consume: %+v", got)
	}

	// The group is drained: a second run ends after --idle with nothing.
	again, err := runConsume(ctx, consumeConfig{server: addr, subjects: subjects, group: "g", consumers: 1,
		pullBatch: 250, idle: 200 * time.Millisecond, count: 10, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if again.Messages != 0 || !strings.Contains(again.Note, "drained") {
		t.Errorf("second consume: %+v", again)
	}
	// Another group gets every message again.
	other, err := runConsume(ctx, consumeConfig{server: addr, subjects: []string{"bench-0"}, group: "other", consumers: 1,
		pullBatch: 1000, idle: 200 * time.Millisecond, count: 1500, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if other.Messages != 1500 {
		t.Errorf("consume of bench-0 by a new group: %+v", other)
	}
}

// Tagged production with tag-filtered consumption, and a fraction of the
// messages failed once: every message is finished, each once.
func TestBenchTagsAndNacks(t *testing.T) {
	addr := testcluster.Broker(t, nil).ClientAddr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs bytes.Buffer
	if _, err := runProduce(ctx, produceConfig{server: addr, subjects: []string{"t"}, size: 10, count: 1000, inflight: 100,
		producers: 1, batch: 100, requests: 4, timeout: 10 * time.Second, errOut: &errs, tag: "rare", tagEvery: 100}); err != nil {
		t.Fatal(err)
	}
	tagged, err := runConsume(ctx, consumeConfig{server: addr, subjects: []string{"t"}, group: "rare", consumers: 1,
		pullBatch: 100, idle: 500 * time.Millisecond, tags: []string{"rare"}, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if tagged.Messages != 10 {
		t.Fatalf("a consumer of tag rare (one message in 100 of 1000) received %d", tagged.Messages)
	}
	nacked, err := runConsume(ctx, consumeConfig{server: addr, subjects: []string{"t"}, group: "flaky", consumers: 2,
		pullBatch: 100, idle: 500 * time.Millisecond, nack: 0.1, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if nacked.Messages != 1000 {
		t.Fatalf("with 10 %% failed once, %d of 1000 messages were finished", nacked.Messages)
	}
	if _, err := runConsume(ctx, consumeConfig{server: addr, subjects: []string{"t"}, group: "x", consumers: 1,
		pullBatch: 1, idle: time.Second, nack: 1.5}); err == nil {
		t.Fatal("--nack 1.5 accepted")
	}
}

func TestBenchProduceReportsFailures(t *testing.T) {
	// Nothing listens on the address: every send fails within its timeout.
	addr := testcluster.Addr(t)
	var errs bytes.Buffer
	sum, err := runProduce(context.Background(), produceConfig{server: addr, subjects: []string{"s"}, size: 1, count: 20,
		inflight: 10, producers: 1, batch: 10, requests: 1, timeout: 300 * time.Millisecond, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Failed != 20 || sum.Messages != 0 {
		t.Errorf("against no broker: %+v", sum)
	}
	if n := strings.Count(errs.String(), "\n"); n != maxShownErrors+1 {
		t.Errorf("printed %d error lines, want %d:\n%s", n, maxShownErrors+1, errs.String())
	}
}

// TestBenchDelayed: a delayed run waits for its messages to fire, and the
// consumer counts them as delayed, none early, with latency from their
// delivery time.
func TestBenchDelayed(t *testing.T) {
	addr := testcluster.Broker(t, nil).ClientAddr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs bytes.Buffer
	sum, err := runProduce(ctx, produceConfig{server: addr, subjects: []string{"later"}, size: 10, count: 500,
		inflight: 100, producers: 1, batch: 100, requests: 4, timeout: 10 * time.Second,
		deliverIn: 700 * time.Millisecond, deliverOver: 500 * time.Millisecond, awaitFired: true, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Messages != 500 || sum.FiredIn < 0.5 || sum.FiredPerS <= 0 || sum.DeliverIn != 0.7 {
		t.Fatalf("delayed produce: %+v; errors: %s", sum, errs.String())
	}
	got, err := runConsume(ctx, consumeConfig{server: addr, subjects: []string{"later"}, group: "g", consumers: 1,
		pullBatch: 100, idle: 500 * time.Millisecond, count: 500, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if got.Messages != 500 || got.Delayed != 500 || got.Early != 0 {
		t.Fatalf("delayed consume: %+v", got)
	}
	for _, bad := range []produceConfig{
		{deliverOver: time.Second, count: 10},
		{deliverIn: time.Second, deliverOver: time.Second},
		{awaitFired: true, count: 10},
		{deliverIn: -time.Second, count: 10},
	} {
		bad.server, bad.subjects, bad.inflight, bad.producers, bad.batch, bad.requests, bad.timeout = addr, []string{"x"}, 1, 1, 1, 1, time.Second
		if _, err := runProduce(ctx, bad); err == nil {
			t.Errorf("runProduce(%+v) accepted a bad combination", bad)
		}
	}
}

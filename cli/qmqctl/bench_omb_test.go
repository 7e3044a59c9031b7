package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/testcluster"
)

const goodWorkload = `
name: t / 1 topic
topics: 1
partitionsPerTopic: 1
messageSize: 100
subscriptionsPerTopic: 1
consumerPerSubscription: 1
producersPerTopic: 1
producerRate: 1000
testDurationMinutes: 1
`

// withField returns goodWorkload with fields set to values (added if
// absent), given as field, value, field, value …
func withField(fieldValues ...string) string {
	lines := strings.Split(goodWorkload, "\n")
	for k := 0; k+1 < len(fieldValues); k += 2 {
		field, value := fieldValues[k], fieldValues[k+1]
		found := false
		for i, l := range lines {
			if strings.HasPrefix(l, field+":") {
				lines[i], found = field+": "+value, true
			}
		}
		if !found {
			lines = append(lines, field+": "+value)
		}
	}
	return strings.Join(lines, "\n")
}

func TestParseWorkloadShipped(t *testing.T) {
	files, err := filepath.Glob("../../test/benchcompare/workloads/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("shipped workloads: %v, %v", files, err)
	}
	for _, f := range files {
		if _, err := readWorkload(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	w, err := readWorkload("../../test/benchcompare/workloads/1-topic-16-partitions-1kb.yaml")
	if err != nil || w.Name != "1 topic / 16 partitions / 1Kb" || w.PartitionsPerTopic != 16 || w.MessageSize != 1024 ||
		w.ProducerRate != 50000 || w.TestDurationMinutes != 15 || w.KeyDistributor != ombKeyNone {
		t.Errorf("1-topic-16-partitions-1kb: %+v, %v", w, err)
	}
	if _, err := readWorkload(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, errWorkload) {
		t.Errorf("a missing file: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, append([]byte(goodWorkload), bytes.Repeat([]byte("\n"), 1<<20)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readWorkload(big); err == nil || !strings.Contains(err.Error(), "over 1 MiB") {
		t.Errorf("a file over 1 MiB: %v", err)
	}
}

// Each field at, just inside and just outside its bounds.
func TestParseWorkloadBounds(t *testing.T) {
	if _, err := parseWorkload([]byte(goodWorkload)); err != nil {
		t.Fatalf("the good workload: %v", err)
	}
	for _, tc := range []struct {
		field, value string
		ok           bool
	}{
		{"name", `""`, false},
		{"topics", "0", false}, {"topics", "1", true}, {"topics", "1000", true}, {"topics", "1001", false},
		{"partitionsPerTopic", "0", false}, {"partitionsPerTopic", "10000", true}, {"partitionsPerTopic", "10001", false},
		{"keyDistributor", "NO_KEY", true}, {"keyDistributor", "KEY_ROUND_ROBIN", true}, {"keyDistributor", "RANDOM_NANO", true}, {"keyDistributor", "BY_HASH", false},
		{"messageSize", "7", false}, {"messageSize", "8", true}, {"messageSize", "1048576", true}, {"messageSize", "1048577", false}, {"messageSize", "-1", false},
		{"randomBytesRatio", "-0.1", false}, {"randomBytesRatio", "1", true}, {"randomBytesRatio", "1.01", false},
		{"randomizedPayloadPoolSize", "-1", false},
		{"subscriptionsPerTopic", "-1", false}, {"subscriptionsPerTopic", "0", true}, {"subscriptionsPerTopic", "1000", true}, {"subscriptionsPerTopic", "1001", false},
		{"consumerPerSubscription", "0", false}, {"consumerPerSubscription", "1000", true}, {"consumerPerSubscription", "1001", false},
		{"producersPerTopic", "0", false}, {"producersPerTopic", "1000", true}, {"producersPerTopic", "1001", false},
		{"producerRate", "-1", false}, {"producerRate", "0", true}, {"producerRate", "10000000", true}, {"producerRate", "10000001", false},
		{"consumerBacklogSizeGB", "0", true}, {"consumerBacklogSizeGB", "1", false},
		{"testDurationMinutes", "-1", false}, {"testDurationMinutes", "1440", true}, {"testDurationMinutes", "1441", false},
		{"warmupDurationMinutes", "0", true}, {"warmupDurationMinutes", "-1", false}, {"warmupDurationMinutes", "1441", false},
		{"payloadFile", "payload/payload-100b.data", true},
		{"useRandomizedPayloads", "yes please", false},
		{"topics", "many", false},
		{"producerRate", "1e99", false},
		{"partitionsPerTopc", "1", false}, // a typo: unknown field
		{"producerIncrementRate", "10", false},
	} {
		_, err := parseWorkload([]byte(withField(tc.field, tc.value)))
		if tc.ok && err != nil {
			t.Errorf("%s: %s refused: %v", tc.field, tc.value, err)
		}
		if !tc.ok && (err == nil || !errors.Is(err, errWorkload)) {
			t.Errorf("%s: %s: %v, want an errWorkload refusal", tc.field, tc.value, err)
		}
	}
	// Combined bounds.
	for _, bad := range []string{
		withField("topics", "100") + "\nproducersPerTopic: 11",                                                                     // 1,100 producers
		strings.Replace(withField("subscriptionsPerTopic", "10"), "consumerPerSubscription: 1", "consumerPerSubscription: 101", 1), // 1,010 consumers
		withField("messageSize", "1048576") + "\nuseRandomizedPayloads: true\nrandomizedPayloadPoolSize: 257",                      // 257 MiB of payloads
		"", "---\n" + goodWorkload + "\n---\n" + goodWorkload, "[1, 2]",
	} {
		if _, err := parseWorkload([]byte(bad)); !errors.Is(err, errWorkload) {
			t.Errorf("accepted:\n%s\n(%v)", bad, err)
		}
	}
	for _, good := range []string{
		withField("topics", "100", "producersPerTopic", "10"),
		withField("subscriptionsPerTopic", "10", "consumerPerSubscription", "100"),
		withField("messageSize", "1048576", "useRandomizedPayloads", "true", "randomizedPayloadPoolSize", "256"),
	} {
		if _, err := parseWorkload([]byte(good)); err != nil {
			t.Errorf("at the bound, refused: %v\n%s", err, good)
		}
	}
}

func TestOMBSubjectsAreValidAndFresh(t *testing.T) {
	a := ombSubjects("omb", "1 topic / 16 partitions / 1Kb", 2)
	b := ombSubjects("omb", "1 topic / 16 partitions / 1Kb", 2)
	if a[0] == b[0] || !strings.HasPrefix(a[0], "omb-1-topic---16-partitions---1Kb-") || !strings.HasSuffix(a[1], "-1") {
		t.Errorf("subjects %v and %v", a, b)
	}
	long := ombSubjects("omb", strings.Repeat("x", 500), 1)
	if len(long[0]) > 100 {
		t.Errorf("a long name gives a %d-byte subject", len(long[0]))
	}
}

// A short run on a broker: periods, aggregated percentiles, every message
// received by both subscriptions, and OMB's field names in the JSON.
func TestBenchOMBRun(t *testing.T) {
	addr := testcluster.Broker(t, nil).ClientAddr()
	w, err := parseWorkload([]byte(withField("topics", "2", "subscriptionsPerTopic", "2",
		"useRandomizedPayloads", "true", "randomBytesRatio", "0.5", "randomizedPayloadPoolSize", "10")))
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := runOMB(ctx, w, ombConfig{server: addr, prefix: "omb", duration: 1200 * time.Millisecond, warmup: 300 * time.Millisecond,
		period: 400 * time.Millisecond, inflight: 100, batch: 100, requests: 4, timeout: 10 * time.Second, progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	// The warm-up's line, then the measured phase's three.
	if n := strings.Count(progress.String(), "Pub rate"); n != 4 || len(res.PublishRate) != 3 || len(res.EndToEndLatency99pct) != 3 {
		t.Fatalf("%d progress lines, %d periods in the result:\n%s", n, len(res.PublishRate), progress.String())
	}
	// Two producers at 500 msgs/s each: within the measured phase (1.2 s
	// asked, longer if the machine is slow), widened by the 10 ms a late
	// slot of the warm-up may still be sent in, at most 500 × that + 1
	// slots each fall due.
	most := int64(2 * (500*(res.MeasuredSeconds+pacerCatchUp.Seconds()) + 1))
	if res.MeasuredSeconds < 1.2 || res.MessagesPublished == 0 || res.MessagesPublished > most || res.PublishErrors != 0 {
		t.Errorf("published %d in %.3f s (at most %d), errors %d", res.MessagesPublished, res.MeasuredSeconds, most, res.PublishErrors)
	}
	if res.AggregatedPublishLatency50pct <= 0 || res.AggregatedPublishLatency50pct > res.AggregatedPublishLatency99pct ||
		res.AggregatedPublishLatency99pct > res.AggregatedPublishLatencyMax || res.AggregatedEndToEndLatency50pct <= 0 ||
		res.AggregatedEndToEndLatency9999pct > res.AggregatedEndToEndLatencyMax {
		t.Errorf("aggregated latencies: %+v", res)
	}
	if res.MessagesReceived == 0 || res.Partitions != 1 || res.Topics != 2 || res.Driver != "qmq" {
		t.Errorf("result: %+v", res)
	}
	var js bytes.Buffer
	if err := res.write(&js, true); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"workload", "publishRate", "consumeRate", "backlog", "publishLatency99pct", "endToEndLatency999pct",
		"aggregatedPublishLatency50pct", "aggregatedPublishLatency9999pct", "aggregatedEndToEndLatency99pct", "aggregatedEndToEndLatencyMax",
		"aggregatedEndToEndLatencyQuantiles"} {
		if _, ok := m[f]; !ok {
			t.Errorf("the JSON result lacks %s", f)
		}
	}
	var text bytes.Buffer
	if err := res.write(&text, false); err != nil || !strings.Contains(text.String(), "Aggregated E2E Latency (ms) avg:") ||
		!strings.Contains(text.String(), "99.99%:") {
		t.Errorf("text result: %v\n%s", err, text.String())
	}
	for _, bad := range []ombConfig{{duration: 0}, {duration: ombMaxDurationGiven + 1}, {duration: time.Second, warmup: -1},
		{duration: time.Second, warmup: ombMaxDurationGiven + 1},
		{duration: time.Second, period: ombMinPeriod - 1}, {duration: time.Second, period: ombMaxPeriod + 1}} {
		bad.server, bad.inflight, bad.batch, bad.requests, bad.timeout, bad.progress = addr, 1, 1, 1, time.Second, &progress
		if bad.period == 0 {
			bad.period = time.Second
		}
		if _, err := runOMB(ctx, w, bad); err == nil {
			t.Errorf("runOMB accepted %+v", bad)
		}
	}
}

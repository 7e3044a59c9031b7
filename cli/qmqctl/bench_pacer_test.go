package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/testcluster"
)

func TestPacerSchedule(t *testing.T) {
	start := time.Unix(1000, 0)
	p := newPacer(1000, start) // a slot every millisecond
	// Early senders get the schedule's slots, in the future.
	for k := range 5 {
		if got, want := p.slot(start), start.Add(time.Duration(k)*time.Millisecond); !got.Equal(want) {
			t.Fatalf("slot %d = %v, want %v", k, got.Sub(start), want.Sub(start))
		}
	}
	// 5 ms late for slot 5 (due at 5 ms), within the catch-up bound: sent at once, no slip.
	now := start.Add(10 * time.Millisecond)
	if got := p.slot(now); !got.Equal(start.Add(5 * time.Millisecond)) {
		t.Fatalf("a late slot = %v, want 5ms", got.Sub(start))
	}
	if late, slipped := p.behind(); late != 5*time.Millisecond || slipped != 0 {
		t.Fatalf("behind = %v, %v; want 5ms, 0", late, slipped)
	}
	// A stall of one second: the schedule slips, and only pacerCatchUp of
	// it (10 slots, plus the one due now) may go at once.
	now = start.Add(time.Second + 6*time.Millisecond)
	burst := 0
	for !p.slot(now).After(now) {
		burst++
		if burst > 1000 {
			t.Fatal("the pacer bursts without bound after a stall")
		}
	}
	if want := int(pacerCatchUp/time.Millisecond) + 1; burst != want {
		t.Fatalf("after a stall %d slots were due at once, want %d", burst, want)
	}
	late, slipped := p.behind()
	if late != pacerCatchUp {
		t.Errorf("latest send %v, want the catch-up bound %v", late, pacerCatchUp)
	}
	// Slot 6 was due at 6 ms and taken at 1006 ms: 1 s late, 10 ms of it allowed.
	if want := time.Second - pacerCatchUp; slipped != want {
		t.Errorf("slipped %v, want %v", slipped, want)
	}
}

func TestCheckRate(t *testing.T) {
	for _, bad := range []int64{0, -1, -20000, maxBenchRate + 1, 1 << 62} {
		if err := checkRate(bad); err == nil || !strings.Contains(err.Error(), "--rate") {
			t.Errorf("checkRate(%d) = %v, want a --rate error", bad, err)
		}
	}
	for _, good := range []int64{1, 20000, maxBenchRate} {
		if err := checkRate(good); err != nil {
			t.Errorf("checkRate(%d) = %v", good, err)
		}
	}
}

// Bad --rate values are refused before anything connects; an unset
// --rate sends as fast as the window allows.
func TestBenchProduceRateFlag(t *testing.T) {
	for _, bad := range []string{"0", "-1", "10000001", "99999999999999", "fast"} {
		out, err := runCLI("--server", "127.0.0.1:1", "bench", "produce", "--rate", bad, "--count", "1", "--timeout", "100ms")
		if err == nil || !strings.Contains(err.Error()+out, "rate") {
			t.Errorf("--rate %s: err %v, output %q; want a --rate error", bad, err, out)
		}
	}
	if _, err := runProduce(context.Background(), produceConfig{server: "127.0.0.1:1", subjects: []string{"s"}, count: 1,
		inflight: 1, producers: 1, batch: 1, requests: 1, timeout: time.Second, rate: -5}); err == nil {
		t.Error("runProduce with rate -5 accepted it")
	}
}

// A paced run never sends ahead of its schedule: within a duration D at
// rate R at most R×D+1 slots fall due, whatever the machine's speed.
func TestBenchProduceRate(t *testing.T) {
	addr := testcluster.Broker(t, nil).ClientAddr()
	var errs bytes.Buffer
	sum, err := runProduce(context.Background(), produceConfig{server: addr, subjects: []string{"paced"}, size: 16,
		duration: 500 * time.Millisecond, inflight: 100, producers: 3, batch: 100, requests: 4, timeout: 10 * time.Second,
		rate: 400, errOut: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Messages == 0 || sum.Failed != 0 || sum.Messages > 201 {
		t.Fatalf("400 msgs/s for 0.5 s sent %d (failed %d), want 1..201; errors: %s", sum.Messages, sum.Failed, errs.String())
	}
	if sum.Rate != 400 || sum.MaxLate > ms(pacerCatchUp) {
		t.Errorf("paced summary: %+v", sum)
	}
	var out bytes.Buffer
	if err := sum.write(&out, false); err != nil || !strings.Contains(out.String(), "400 msgs/s asked") {
		t.Errorf("summary text lacks the rate: %v\n%s", err, out.String())
	}
}

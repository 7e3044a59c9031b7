package fsm

import (
	"bytes"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
)

// A reclaimed consumer is forgotten; its epoch is never given again, also
// after a checkpoint and a restart.
func TestReclaimedConsumerIsForgottenAcrossRestart(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	applyAt(f, 1, &Append{Now: 1, Messages: []*message.Message{unitMsg("a", "s", 4), unitMsg("b", "s", 4)}})
	applyAt(f, 2, &Pull{Start: StartEarliest, Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "gone", Max: 1})
	applyAt(f, 3, &Reclaim{Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "gone"})
	applyAt(f, 4, &Pull{Start: StartEarliest, Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "next", Max: 1})
	if f.Epoch(ConsumerID{Subject: "s", ConsumerGroup: "g", Consumer: "gone"}) != 0 || f.Epoch(ConsumerID{Subject: "s", ConsumerGroup: "g", Consumer: "next"}) == 0 {
		t.Fatal("the reclaimed consumer is still known, or the new one is not")
	}
	if c := f.st.byKey[consumerKey{"s", "g", "next"}]; c.epoch != 2 {
		t.Fatalf("the new consumer got epoch %d; epochs are never reused, want 2", c.epoch)
	}
	takeSnapshot(t, f)
	before := stateBytes(f)
	f.Close()

	g := unitOpen(t, cfg)
	if !bytes.Equal(stateBytes(g), before) {
		t.Fatal("state differs after a restart")
	}
	if g.Epoch(ConsumerID{Subject: "s", ConsumerGroup: "g", Consumer: "gone"}) != 0 {
		t.Fatal("the reclaimed consumer came back with the restart")
	}
	r := resultAs[*PullResult](t, applyAt(g, 5, &Pull{Start: StartEarliest, Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "third", Max: 5}))
	if len(r.Entries) != 1 || r.Epoch != 3 || g.st.byKey[consumerKey{"s", "g", "third"}].epoch != 3 {
		t.Fatalf("after restart: %+v, epoch %d", r.Entries, r.Epoch)
	}
}

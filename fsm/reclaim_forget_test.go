package fsm

import (
	"bytes"
	"testing"

	"github.com/qmqgo/qmq/logs"
)

// A reclaimed consumer is forgotten; its id is never given again, and the
// gap it leaves survives a checkpoint and a restart.
func TestReclaimedConsumerIsForgottenAcrossRestart(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	applyAt(f, 1, &Append{Now: 1, Messages: []*logs.Message{unitMsg("a", "s", 4), unitMsg("b", "s", 4)}})
	applyAt(f, 2, &Pull{Now: 1, Subject: "s", Group: "g", Consumer: "gone", Max: 1})
	applyAt(f, 3, &Reclaim{Now: 1, Subject: "s", Group: "g", Consumer: "gone"})
	applyAt(f, 4, &Pull{Now: 1, Subject: "s", Group: "g", Consumer: "next", Max: 1})
	if f.Knows(ConsumerID{"s", "g", "gone"}) || !f.Knows(ConsumerID{"s", "g", "next"}) {
		t.Fatal("the reclaimed consumer is still known, or the new one is not")
	}
	if c := f.st.byKey[consumerKey{"s", "g", "next"}]; c.id != 1 {
		t.Fatalf("the new consumer got id %d; ids are never reused, want 1", c.id)
	}
	takeSnapshot(t, f)
	before := stateBytes(f)
	f.Close()

	g := unitOpen(t, cfg)
	if !bytes.Equal(stateBytes(g), before) {
		t.Fatal("state differs after a restart")
	}
	if g.Knows(ConsumerID{"s", "g", "gone"}) {
		t.Fatal("the reclaimed consumer came back with the restart")
	}
	r := resultAs[*PullResult](t, applyAt(g, 5, &Pull{Now: 1, Subject: "s", Group: "g", Consumer: "third", Max: 5}))
	if len(r.Entries) != 1 || g.st.byKey[consumerKey{"s", "g", "third"}].id != 2 {
		t.Fatalf("after restart: %+v, id %d", r.Entries, g.st.byKey[consumerKey{"s", "g", "third"}].id)
	}
}

package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/message"
)

// appendFrom applies an Append of msgs, each sent by the application
// senders names at its index ("" for none), with the limits of apps.
func appendFrom(tb testing.TB, f *FSM, index uint64, now int64, apps []Sender, senders []string, msgs ...*message.Message) *AppendResult {
	tb.Helper()
	c := &Append{Now: now, Messages: msgs, Apps: apps, Senders: make([]int, len(msgs))}
	for i, code := range senders {
		for j, a := range apps {
			if a.App == code {
				c.Senders[i] = j + 1
			}
		}
	}
	return resultAs[*AppendResult](tb, applyAt(f, index, c))
}

// TestDelayedPerHourBound: an hour of delivery time holds at most
// maxDelayedPerHour delayed messages, pending and fired together; the
// next is refused, naming the hour, and changes nothing, while other
// hours and immediate messages go on.
func TestDelayedPerHourBound(t *testing.T) {
	defer func(n int64) { maxDelayedPerHour = n }(maxDelayedPerHour)
	maxDelayedPerHour = 3
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	due := unitNow + 1000
	var refs []uint64
	for i := range 3 {
		r := appendAt(t, f, uint64(1+i), unitNow, delayedMsg(fmt.Sprintf("d%d", i), "s", due))
		if r.Messages[0].Status != Scheduled {
			t.Fatalf("delayed message %d under the bound: %+v", i, r.Messages[0])
		}
		refs = append(refs, r.Messages[0].Ref)
	}
	// One fired: the hour still holds three.
	fireAt(t, f, 4, due, refs[0])
	before := stateBytes(f)
	r := appendAt(t, f, 5, unitNow+1, delayedMsg("over", "s", due+1))
	m := r.Messages[0]
	if m.Status != Rejected || !errors.Is(m.Err, ErrLimit) || !strings.Contains(m.Err.Error(), "holds 3 delayed messages") {
		t.Fatalf("a fourth in the hour: %+v", m)
	}
	wantStateUnchanged(t, f, before)
	r = appendAt(t, f, 6, unitNow+2, delayedMsg("next-hour", "s", due+delaywheel.HourMillis), unitMsg("now", "s", 8))
	if r.Messages[0].Status != Scheduled || r.Messages[1].Status != Appended {
		t.Fatalf("another hour, and an immediate message: %+v", r.Messages)
	}
	// A replica that restarted counts the hour's fired ones from its
	// dispatch log and decides alike.
	takeSnapshot(t, f)
	f.Close()
	g := unitOpen(t, cfg)
	r = appendAt(t, g, 7, unitNow+3, delayedMsg("over-again", "s", due+2))
	if m := r.Messages[0]; m.Status != Rejected || !errors.Is(m.Err, ErrLimit) {
		t.Fatalf("a fourth in the hour after a restart: %+v", m)
	}
}

// TestDelayedPerApplicationBound: an application has at most its
// MaxDelayed delayed messages pending in the broker group; another
// application, and messages of none, are not held back by it, and each one
// fired makes room for one more.
func TestDelayedPerApplicationBound(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	apps := []Sender{{App: "billing", MaxDelayed: 2}, {App: "ops", MaxDelayed: 10}}
	due := unitNow + 1000
	r := appendFrom(t, f, 1, unitNow, apps, []string{"billing", "billing", "billing", "ops", ""},
		delayedMsg("b1", "s", due), delayedMsg("b2", "s", due+delaywheel.HourMillis), delayedMsg("b3", "s", due),
		delayedMsg("o1", "s", due), delayedMsg("n1", "s", due))
	want := []MessageStatus{Scheduled, Scheduled, Rejected, Scheduled, Scheduled}
	for i, m := range r.Messages {
		if m.Status != want[i] {
			t.Fatalf("message %d: %+v, want %v", i, m, want[i])
		}
	}
	b1 := r.Messages[0].Ref
	if err := r.Messages[2].Err; !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "application billing has 2 delayed messages pending") {
		t.Fatalf("billing's third: %v", err)
	}
	if f.st.appDelayed["billing"] != 2 || f.st.appDelayed["ops"] != 1 || len(f.st.appDelayed) != 2 {
		t.Fatalf("pending per application %v", f.st.appDelayed)
	}
	// Immediate messages are not delayed ones.
	if r := appendFrom(t, f, 2, unitNow, apps, []string{"billing"}, unitMsg("now", "s", 8)); r.Messages[0].Status != Appended {
		t.Fatalf("an immediate message of billing's: %+v", r.Messages[0])
	}
	fireAt(t, f, 3, due, b1)
	if r := appendFrom(t, f, 4, unitNow, apps, []string{"billing"}, delayedMsg("b4", "s", due)); r.Messages[0].Status != Scheduled {
		t.Fatalf("billing's after one fired: %+v", r.Messages[0])
	}
	// A record keeps its application: the fire gave billing's count back,
	// not ops's.
	if f.st.appDelayed["billing"] != 2 || f.st.appDelayed["ops"] != 1 {
		t.Fatalf("pending per application %v", f.st.appDelayed)
	}
	// A sender whose code is not a name is refused, like the message.
	bad := []Sender{{App: "no spaces", MaxDelayed: 10}}
	before := stateBytes(f)
	if r := appendFrom(t, f, 5, unitNow, bad, []string{"no spaces"}, delayedMsg("x", "s", due)); r.Messages[0].Status != Rejected || !errors.Is(r.Messages[0].Err, ErrInvalid) {
		t.Fatalf("a bad application code: %+v", r.Messages[0])
	}
	wantStateUnchanged(t, f, before)
	// Restarted, the replica counts the same: billing is at its limit.
	takeSnapshot(t, f)
	f.Close()
	g := unitOpen(t, cfg)
	if !bytes.Equal(before, stateBytes(g)) || g.st.appDelayed["billing"] != 2 {
		t.Fatalf("after a restart: pending per application %v", g.st.appDelayed)
	}
	if r := appendFrom(t, g, 6, unitNow, apps, []string{"billing"}, delayedMsg("b5", "s", due)); r.Messages[0].Status != Rejected {
		t.Fatalf("billing's third after a restart: %+v", r.Messages[0])
	}
}

// TestRetriesDoNotFillAnHour: retries, which a client aims at any hour
// with its nacks, do not count towards the hour's bound of delayed
// messages (the unacked windows bound them), so one application's nacks
// cannot refuse another's delayed messages.
func TestRetriesDoNotFillAnHour(t *testing.T) {
	defer func(n int64) { maxDelayedPerHour = n }(maxDelayedPerHour)
	maxDelayedPerHour = 3
	r := newGroupRig(t)
	r.sendN("s", 5)
	target := (delaywheel.Hour(r.now) + 5) * delaywheel.HourMillis
	resultAs[*PullResult](t, r.pullAs("noisy", 10, "g", "c", 5))
	r.nack("g", "c", target+10, message.AckRange{First: 0, Last: 4})
	if hs := r.f.st.hours[delaywheel.Hour(target)]; hs == nil || hs.pending != 5 || hs.delayed != 0 {
		t.Fatalf("the target hour %+v, want five retries and no delayed message", hs)
	}
	res := appendFrom(t, r.f, r.next(), r.now, []Sender{{App: "victim", MaxDelayed: 100}}, []string{"victim"},
		delayedMsg("v1", "other", target+20))
	if m := res.Messages[0]; m.Status != Scheduled {
		t.Fatalf("a delayed message refused for another application's retries: %v", m.Err)
	}
}

// TestOneApplicationCannotFillAnHour: an application holds at most its
// MaxDelayed of an hour's delayed messages, pending and fired, so sending
// again as its messages fire does not fill the hour for the others.
func TestOneApplicationCannotFillAnHour(t *testing.T) {
	defer func(n int64) { maxDelayedPerHour = n }(maxDelayedPerHour)
	maxDelayedPerHour = 4
	f := unitOpen(t, unitConfig(t.TempDir()))
	apps := []Sender{{App: "noisy", MaxDelayed: 2}, {App: "victim", MaxDelayed: 100}}
	idx, now := uint64(0), unitNow
	next := func() uint64 { idx++; return idx }
	r := appendFrom(t, f, next(), now, apps, []string{"noisy", "noisy"}, delayedMsg("n0", "s", now+1), delayedMsg("n1", "s", now+1))
	fireAt(t, f, next(), now+2, r.Messages[0].Ref, r.Messages[1].Ref)
	r = appendFrom(t, f, next(), now+3, apps, []string{"noisy"}, delayedMsg("n2", "s", now+4))
	if m := r.Messages[0]; m.Status != Rejected || !errors.Is(m.Err, ErrLimit) || !strings.Contains(m.Err.Error(), "application noisy has 2 delayed messages in hour") {
		t.Fatalf("noisy's third in the hour, its first two fired: %+v", m)
	}
	r = appendFrom(t, f, next(), now+3, apps, []string{"victim"}, delayedMsg("v", "s", now+60_000))
	if m := r.Messages[0]; m.Status != Scheduled {
		t.Fatalf("victim's delayed message: %v", m.Err)
	}
	// Another hour has room for noisy.
	r = appendFrom(t, f, next(), now+3, apps, []string{"noisy"}, delayedMsg("n3", "s", now+delaywheel.HourMillis))
	if m := r.Messages[0]; m.Status != Scheduled {
		t.Fatalf("noisy's in the next hour: %v", m.Err)
	}
}

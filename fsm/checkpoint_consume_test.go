package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// consumeConfig is the configuration of the consumer-state tests: message
// segments that retention removes at 3 MiB.
func consumeConfig(c *Config) { c.Retention = logs.Retention{MaxBytes: 3 << 20} }

// consumeScript returns Raft entries that leave every field of the
// consumer state set: group settings, lives, retries pending (of a life
// that ended too), dead letters (one dropped at the bound, which the
// caller lowers to 1), messages lost to retention, idle groups, and
// window entries delivered twice with deadlines.
func consumeScript() []*raft.Log {
	var out []*raft.Log
	now := rigStart
	sent := 0
	add := func(cmd encoder) {
		out = append(out, unitEntry(uint64(len(out)+1), cmd))
		now += 1000
	}
	big := func(n int) {
		var msgs []*message.Message
		for range n {
			m := bigMsg(fmt.Sprint("m", sent), "s")
			m.Tags = [][]string{nil, {"a"}, {"a", "b"}}[sent%3]
			sent++
			msgs = append(msgs, m)
		}
		add(&Append{Now: now, Messages: msgs})
	}
	pull := func(g string, n int) {
		add(&Pull{Now: now, Subject: "s", ConsumerGroup: g, Consumer: "c", Max: n, Start: StartEarliest})
	}
	nack := func(g string, retryAt int64, r message.AckRange) {
		add(&Nack{Now: now, Subject: "s", ConsumerGroup: g, Consumer: "c", RetryAt: retryAt, Ranges: []message.AckRange{r}})
	}
	big(4)
	pull("lost", 1)
	add(&Ack{Now: now, Subject: "s", ConsumerGroup: "lost", Consumer: "c", Ranges: []message.AckRange{one(0)}})
	for range 8 {
		big(5) // retention removes the first messages: "lost" loses those after its cursor
	}
	add(&SetConsumerGroup{Now: now, Subject: "s", ConsumerGroup: "g", Set: setAll, Start: StartEarliest,
		Settings: ConsumerGroupSettings{MaxDeliveries: 3, RetryFirst: 1000, RetryMax: 4000, AckWait: 60_000, MaxInFlight: 50, IdleExpiry: 600_000}})
	pull("g", 3)
	nack("g", 0, one(0))   // a retry in a second
	nack("g", now, one(1)) // due again at once
	pull("g", 1)           // handed out a second time, with a deadline
	add(&SetConsumerGroup{Now: now, Subject: "s", ConsumerGroup: "d", Set: SetMaxDeliveries, Settings: ConsumerGroupSettings{MaxDeliveries: 1}, Start: StartEarliest})
	pull("d", 2)
	add(&Nack{Now: now, Subject: "s", ConsumerGroup: "d", Consumer: "c", Ranges: []message.AckRange{{First: 0, Last: 1}}}) // two dead letters, one dropped
	pull("r", 1)
	nack("r", now+5000, one(0))
	add(&ResetConsumerGroup{Now: now, Subject: "s", ConsumerGroup: "r", To: StartAtTime, At: now - 3000}) // a new life; the retry is of the old one
	add(&Pull{Now: now, Subject: "s", ConsumerGroup: "idle", Consumer: "c", Max: 1, IdleExpiry: 60_000, Tags: []string{"a", "b"}, TagsAll: true})
	add(&Reclaim{Now: now, Subject: "s", ConsumerGroup: "idle", Consumer: "c"})
	add(&Pull{Now: now, Subject: "s", ConsumerGroup: "amo", Consumer: "c", Max: 2, AtMostOnce: true, Start: StartEarliest})
	return out
}

// consumeMore returns entries after consumeScript's: retries fired, an
// expire, an extend, dead letters resent, settings changed, an idle group
// forgotten.
func consumeMore(from uint64, refs []uint64) []*raft.Log {
	now := rigStart + int64(from)*1000 + 120_000
	cmds := []encoder{
		&Fire{Now: now, Refs: refs},
		&Extend{Now: now, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: []message.AckRange{{First: 0, Last: 3}}},
		&Pull{Now: now, Subject: "s", ConsumerGroup: "g", Consumer: "c2", Max: 5},
		&Expire{Now: now + 60_000, Subject: "s", ConsumerGroup: "g", Consumer: "c2", Ranges: []message.AckRange{{First: 0, Last: 4}}},
		&DeadLetters{Now: now, Subject: "s", ConsumerGroup: "d", Op: DeadResend, All: true},
		&SetConsumerGroup{Now: now, Subject: "s", ConsumerGroup: "g", Set: SetAckWait, Settings: ConsumerGroupSettings{AckWait: 0}},
		&Forget{Now: now + 60_000, Subject: "s", ConsumerGroup: "idle", IdleFor: 60_000},
		&Pull{Now: now, Subject: "s", ConsumerGroup: "r", Consumer: "c2", Max: 5},
	}
	var out []*raft.Log
	for i, c := range cmds {
		out = append(out, unitEntry(from+uint64(i)+1, c))
	}
	return out
}

// wantEveryConsumerField fails unless f's state has every field of the
// consumer state set.
func wantEveryConsumerField(t *testing.T, f *FSM) {
	t.Helper()
	st := f.st
	g, d, r, lost, idle := st.groups[groupKey{"s", "g"}], st.groups[groupKey{"s", "d"}], st.groups[groupKey{"s", "r"}],
		st.groups[groupKey{"s", "lost"}], st.groups[groupKey{"s", "idle"}]
	if g == nil || d == nil || r == nil || lost == nil || idle == nil {
		t.Fatal("a group of the script is missing")
	}
	cs := st.byKey[consumerKey{"s", "g", "c"}]
	var twice, deadline bool
	for _, p := range cs.window {
		twice = twice || p.deliveries == 2
		deadline = deadline || p.deadline != 0
	}
	switch {
	case g.settings == DefaultConsumerGroupSettings() || g.retrying != 1 || g.idleSince == 0:
		t.Fatalf("group g: %+v", g)
	case len(d.dead) != 1 || d.deadDropped != 1 || d.dead[0].deliveries != 1 || d.dead[0].at == 0:
		t.Fatalf("group d: %+v", d)
	case r.gen <= 1 || r.retrying != 0:
		t.Fatalf("group r: %+v", r)
	case lost.lost == 0:
		t.Fatalf("group lost: %+v", lost)
	case idle.consumers != 0 || idle.settings.IdleExpiry != 60_000:
		t.Fatalf("group idle: %+v", idle)
	case !twice || !deadline:
		t.Fatalf("window %+v", cs.window)
	case st.retries != 2 || st.nextGen < 6 || st.deadTotal != 1:
		t.Fatalf("retries %d, next gen %d, dead %d", st.retries, st.nextGen, st.deadTotal)
	}
}

// The consumer state round-trips through the checkpoint, survives a
// restart (checkpoint and replay) and a snapshot install byte-identical,
// and the replicas stay identical as the consumer commands go on.
func TestConsumerStateCheckpoint(t *testing.T) {
	lowerLimit(t, &maxDeadPerGroup, 1)
	entries := consumeScript()
	ref := unitFSM(t, consumeConfig)
	var refs []uint64
	ref.OnSchedule(func(e delaywheel.Entry) { refs = append(refs, e.Ref) })
	for i, r := range applyAll(ref, entries) {
		if len(r) > 5 && r[:6] == "error:" {
			t.Fatalf("entry %d: %s", i+1, r)
		}
	}
	wantEveryConsumerField(t, ref)

	cp := ref.currentCheckpoint()
	b := cp.encode()
	got, err := decodeCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	for k, g := range ref.st.groups {
		// Printed, as an empty slice decodes as nil.
		if d := got.st.groups[k]; d == nil || fmt.Sprintf("%+v", *d) != fmt.Sprintf("%+v", *g) {
			t.Fatalf("group %v decoded\n%+v\nwant\n%+v", k, d, g)
		}
	}
	for k, c := range ref.st.consumers {
		// nextDeadline is a lower bound, exact once derived on decode.
		d := got.st.consumers[k]
		if d == nil {
			t.Fatalf("consumer %v not decoded", k)
		}
		dc, cc := *d, *c
		dc.nextDeadline, cc.nextDeadline = 0, 0
		if fmt.Sprintf("%+v", dc) != fmt.Sprintf("%+v", cc) {
			t.Fatalf("consumer %v decoded\n%+v\nwant\n%+v", k, d, c)
		}
	}
	for k, h := range ref.st.hours {
		if d := got.st.hours[k]; d == nil || d.pending != h.pending {
			t.Fatalf("hour %v decoded\n%+v\nwant\n%+v", k, d, h)
		}
	}
	if len(got.st.groups) != len(ref.st.groups) || len(got.st.consumers) != len(ref.st.consumers) || len(got.st.hours) != len(ref.st.hours) ||
		got.st.nextGen != ref.st.nextGen || got.st.retries != ref.st.retries || got.st.deadTotal != ref.st.deadTotal {
		t.Fatalf("decoded state\n%+v\nwant\n%+v", got.st, ref.st)
	}
	if !bytes.Equal(got.encode(), b) {
		t.Fatal("re-encoding differs")
	}

	// Restart: a snapshot halfway, the rest applied, closed, reopened and
	// replayed.
	cfg := unitConfig(t.TempDir())
	consumeConfig(&cfg)
	f := unitOpen(t, cfg)
	applyAll(f, entries[:len(entries)/2])
	takeSnapshot(t, f)
	applyAll(f, entries[len(entries)/2:])
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := unitOpen(t, cfg)
	applyAll(g, entries)
	if !bytes.Equal(stateBytes(g), stateBytes(ref)) {
		t.Fatal("state after the restart differs")
	}
	wantSameFiles(t, ref.cfg.Dir, cfg.Dir)

	// Snapshot install.
	h := unitFSM(t, consumeConfig)
	if err := h.Restore(io.NopCloser(bytes.NewReader(snapshotStream(t, ref)))); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	more := consumeMore(uint64(len(entries)), refs)
	wantTwins(t, ref, h, more)
	applyAll(g, more)
	if !bytes.Equal(stateBytes(g), stateBytes(ref)) {
		t.Fatal("the restarted replica differs after more consumer commands")
	}
	if info, ok := ref.ConsumerGroup("s", "d"); !ok || info.DeadLetters != 0 || info.Redeliver != 1 {
		t.Fatalf("the later commands did not apply: %+v", info)
	}
}

// The checkpoint decoder refuses consumer fields out of their range.
func TestDecodeCheckpointRefusesConsumerFields(t *testing.T) {
	lowerLimit(t, &maxDeadPerGroup, 1)
	ref := unitFSM(t, consumeConfig)
	applyAll(ref, consumeScript())
	g := func(st *state, name string) *group { return st.groups[groupKey{"s", name}] }
	c := func(st *state) *consumer { return st.byKey[consumerKey{"s", "g", "c"}] }
	for name, mutate := range map[string]func(st *state){
		"max deliveries 0":         func(st *state) { g(st, "g").settings.MaxDeliveries = 0 },
		"ack wait over its bound":  func(st *state) { g(st, "g").settings.AckWait = maxAckWait + 1 },
		"retry max under first":    func(st *state) { g(st, "g").settings.RetryMax = 500 },
		"negative retrying":        func(st *state) { g(st, "g").retrying = -1 },
		"more retrying than all":   func(st *state) { g(st, "r").retrying = 3 },
		"negative lost":            func(st *state) { g(st, "lost").lost = -1 },
		"negative dead dropped":    func(st *state) { g(st, "d").deadDropped = -1 },
		"negative idle since":      func(st *state) { g(st, "idle").idleSince = -1 },
		"life past the last":       func(st *state) { g(st, "r").gen = st.nextGen + 1 },
		"dead letter deliveries":   func(st *state) { g(st, "d").dead[0].deliveries = limits.MaxDeliveries + 1 },
		"dead letter negative":     func(st *state) { g(st, "d").dead[0].seq = -1 },
		"redelivery deliveries":    func(st *state) { g(st, "g").redeliver = []redelivery{{seq: 1, deliveries: limits.MaxDeliveries + 1}} },
		"window deliveries 0":      func(st *state) { c(st).window[0].deliveries = 0 },
		"window deliveries over":   func(st *state) { c(st).window[0].deliveries = limits.MaxDeliveries + 1 },
		"window deadline negative": func(st *state) { c(st).window[0].deadline = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			cp := ref.currentCheckpoint()
			b := cp.encode()
			good := mustDecodeCheckpoint(t, b)
			mutate(good.st)
			bad := good.encode()
			if got, err := decodeCheckpoint(bad); err == nil {
				t.Fatalf("decoded %+v", got.st)
			} else if !errorsIsBadCheckpoint(err) {
				t.Fatalf("error %v", err)
			}
		})
	}
}

func errorsIsBadCheckpoint(err error) bool { return errors.Is(err, ErrBadCheckpoint) }

package fsm

// A rig for the tests of consumer groups: one FSM, its next Raft index, a
// leader clock the test moves, and the schedule entries apply announced
// (retry records among them).

import (
	"fmt"
	"testing"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/version"
)

const rigStart = int64(1_800_000_000_000)

type groupRig struct {
	t     *testing.T
	f     *FSM
	idx   uint64
	now   int64
	sched []delaywheel.Entry
	sent  int
}

func newGroupRig(t *testing.T, mutate ...func(*Config)) *groupRig {
	r := &groupRig{t: t, f: unitFSM(t, mutate...), now: rigStart}
	r.f.OnSchedule(func(e delaywheel.Entry) { r.sched = append(r.sched, e) })
	return r
}

// v2 raises the rig's group to version 2 (a SetVersion as the next
// entry), where the timeline and the stored bytes are recorded.
func (r *groupRig) v2() *groupRig {
	r.t.Helper()
	resultAs[*VersionResult](r.t, r.apply(&SetVersion{Now: r.now, Version: version.V2}))
	return r
}

// apply applies cmd as the next entry.
func (r *groupRig) apply(cmd encoder) any {
	r.idx++
	return applyAt(r.f, r.idx, cmd)
}

// send appends one message to subject per tag set (nil: no tags) and
// returns their consume-log sequences.
func (r *groupRig) send(subject string, tagSets ...[]string) []int64 {
	r.t.Helper()
	var msgs []*message.Message
	for _, tags := range tagSets {
		m := unitMsg(fmt.Sprint("m", r.sent), subject, 8)
		m.Tags = tags
		r.sent++
		msgs = append(msgs, m)
	}
	var seqs []int64
	for i, res := range appendAt(r.t, r.f, r.next(), r.now, msgs...).Messages {
		if res.Status != Appended {
			r.t.Fatalf("message %d: %+v", i, res)
		}
		seqs = append(seqs, res.Seq)
	}
	return seqs
}

// sendN appends n messages without tags to subject.
func (r *groupRig) sendN(subject string, n int) []int64 {
	return r.send(subject, make([][]string, n)...)
}

func (r *groupRig) next() uint64 { r.idx++; return r.idx }

// pull applies p at the rig's time and wants a result.
func (r *groupRig) pull(p Pull) *PullResult {
	r.t.Helper()
	if p.Now == 0 {
		p.Now = r.now
	}
	return resultAs[*PullResult](r.t, r.apply(&p))
}

// pullN pulls up to n entries of s/g by consumer c from the earliest
// message of a new group.
func (r *groupRig) pullN(g, c string, n int) *PullResult {
	r.t.Helper()
	return r.pull(Pull{Subject: "s", ConsumerGroup: g, Consumer: c, Max: n, Start: StartEarliest})
}

func (r *groupRig) ack(g, c string, ranges ...message.AckRange) {
	r.t.Helper()
	resultAs[*AckResult](r.t, r.apply(&Ack{Now: r.now, Subject: "s", ConsumerGroup: g, Consumer: c, Ranges: ranges}))
}

func (r *groupRig) nack(g, c string, retryAt int64, ranges ...message.AckRange) *NackResult {
	r.t.Helper()
	return resultAs[*NackResult](r.t, r.apply(&Nack{Now: r.now, Subject: "s", ConsumerGroup: g, Consumer: c, RetryAt: retryAt, Ranges: ranges}))
}

func (r *groupRig) expire(g, c string, ranges ...message.AckRange) *ExpireResult {
	r.t.Helper()
	return resultAs[*ExpireResult](r.t, r.apply(&Expire{Now: r.now, Subject: "s", ConsumerGroup: g, Consumer: c, Ranges: ranges}))
}

func (r *groupRig) setGroup(g string, set SettingBits, s ConsumerGroupSettings) *ConsumerGroupResult {
	r.t.Helper()
	return resultAs[*ConsumerGroupResult](r.t, r.apply(&SetConsumerGroup{Now: r.now, Subject: "s", ConsumerGroup: g, Set: set, Settings: s, Start: StartEarliest}))
}

// fire applies a Fire of refs at the rig's time.
func (r *groupRig) fire(refs ...uint64) *FireResult {
	r.t.Helper()
	return resultAs[*FireResult](r.t, r.apply(&Fire{Now: r.now, Refs: refs}))
}

// group returns the group's information, which must exist.
func (r *groupRig) group(g string) ConsumerGroupInfo {
	r.t.Helper()
	info, ok := r.f.ConsumerGroup("s", g)
	if !ok {
		r.t.Fatalf("group %s unknown", g)
	}
	return info
}

// dead returns the consume-log sequences of a group's dead letters.
func (r *groupRig) dead(g string) []int64 {
	d, n := r.f.DeadLetters("s", g, 0, 1<<30)
	if len(d) != n {
		r.t.Fatalf("DeadLetters returned %d of %d", len(d), n)
	}
	out := []int64{}
	for _, x := range d {
		out = append(out, x.Seq)
	}
	return out
}

// one is the range of a single pull sequence.
func one(seq int64) message.AckRange { return message.AckRange{First: seq, Last: seq} }

// deliveriesOf returns the deliveries of a pull's entries.
func deliveriesOf(r *PullResult) []uint32 {
	out := []uint32{}
	for _, e := range r.Entries {
		out = append(out, e.Deliveries)
	}
	return out
}

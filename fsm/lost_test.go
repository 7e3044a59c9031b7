package fsm

import (
	"fmt"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// Messages retention removes before a group finished them are counted
// lost: those its cursor had not reached, those due again, those waiting
// for a retry, and dead letters resent.
func TestRetentionCountsLost(t *testing.T) {
	r := newGroupRig(t, func(c *Config) { c.Retention = logs.Retention{MaxBytes: 3 << 20} })
	big := func(n int) {
		for range n {
			appendAt(t, r.f, r.next(), r.now, bigMsg(fmt.Sprint("m", r.sent), "s"))
			r.sent++
		}
	}
	big(4)
	r.pullN("cur", "c", 1)
	r.ack("cur", "c", one(0)) // cursor at 1, then left behind
	r.pullN("red", "c", 3)
	reclaimAt(t, r.f, r.next(), r.now, "s", "red", "c") // 0..2 due again
	r.setGroup("dead", SetMaxDeliveries, ConsumerGroupSettings{MaxDeliveries: 1})
	r.pullN("dead", "c", 2)
	r.nack("dead", "c", 0, message.AckRange{First: 0, Last: 1}) // 0 and 1 dead letters
	r.pullN("retry", "c", 1)
	r.nack("retry", "c", r.now+1000, one(0))
	big(60)
	first := r.f.firstRetained("s", r.f.store.consumeLog("s"))
	if first < 4 {
		t.Fatalf("retention kept from %d", first)
	}
	// Each group's count: entries behind retention's start its cursor had
	// not reached, plus those due again or dead letters.
	for g, want := range map[string]int64{"cur": first - 1, "red": first, "dead": first, "retry": first - 1} {
		if info := r.group(g); info.Lost != want || info.DeadLetters != 0 || info.Redeliver != 0 || info.Cursor != first {
			t.Fatalf("group %s: %+v, want %d lost", g, info, want)
		}
	}
	if r.f.st.deadTotal != 0 {
		t.Fatalf("dead letters in all: %d", r.f.st.deadTotal)
	}
	if p := r.pullN("red", "c2", 1); len(p.Entries) != 1 || p.Entries[0].ConsumeSeq != first {
		t.Fatalf("red pulled %+v", p.Entries)
	}
	// A retry whose message went meanwhile is lost when it fires.
	r.now += 1000
	if res := r.fire(r.sched[0].Ref); res.Fired != 1 || len(res.Subjects) != 0 {
		t.Fatalf("fire of a removed message's retry: %+v", res)
	}
	if info := r.group("retry"); info.Lost != first || info.Retrying != 0 || info.Redeliver != 0 {
		t.Fatalf("retry: %+v", info)
	}
}

package fsm

import (
	"fmt"
	"slices"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
)

// A pull whose reply was lost must not strand its entries: the consumer
// asks again from the pull sequence it expects, and gets them again first.
func TestPullResendsWhatTheConsumerNeverReceived(t *testing.T) {
	f := unitFSM(t)
	var msgs []*message.Message
	for i := range 6 {
		msgs = append(msgs, unitMsg(fmt.Sprint("m", i), "s", 8))
	}
	applyAt(f, 1, &Append{Now: 1, Messages: msgs})
	pull := func(index uint64, max int, from int64) []int64 {
		r := resultAs[*PullResult](t, applyAt(f, index, &Pull{Start: StartEarliest, Now: 2, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: max, Resend: true, From: from}))
		var seqs []int64
		for _, e := range r.Entries {
			seqs = append(seqs, e.PullSeq)
		}
		return seqs
	}
	if got := pull(2, 3, 0); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("first pull: %v", got)
	}
	// That reply was lost: the consumer still expects pull sequence 0.
	if got := pull(3, 4, 0); !slices.Equal(got, []int64{0, 1, 2, 3}) {
		t.Fatalf("pull after a lost reply: %v, want 0 1 2 again, then 3", got)
	}
	// It acks 1 only, and has received up to 3: nothing is resent.
	resultAs[*AckResult](t, applyAt(f, 4, &Ack{Now: 2, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: []message.AckRange{{First: 1, Last: 1}}}))
	if got := pull(5, 10, 4); !slices.Equal(got, []int64{4, 5}) {
		t.Fatalf("pull from 4: %v, want only the new 4 5", got)
	}
	// A restarted consumer with the same name starts from 0 and gets every
	// entry it holds unacked, skipping the acked one.
	if got := pull(6, 10, 0); !slices.Equal(got, []int64{0, 2, 3, 4, 5}) {
		t.Fatalf("pull from 0: %v, want the unacked 0 2 3 4 5", got)
	}
	// Without Resend a pull hands out only new entries.
	r := resultAs[*PullResult](t, applyAt(f, 7, &Pull{Start: StartEarliest, Now: 2, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10}))
	if len(r.Entries) != 0 {
		t.Fatalf("pull without resend: %v", r.Entries)
	}
}

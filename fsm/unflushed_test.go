package fsm

import (
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/qmqgo/qmq/internal/message"
)

// A tag-filtered pull, and a group started at a time, in the same batch as
// the Append of what they read: the entries and messages appended by the
// batch are read, not passed over (nor read past the end).
func TestPullsReadWhatTheirBatchAppended(t *testing.T) {
	f := unitFSM(t)
	var msgs []*message.Message
	for i := range 6 {
		m := unitMsg(string(rune('a'+i)), "s", 10)
		if i%2 == 1 {
			m.Tags = []string{"odd"}
		}
		msgs = append(msgs, m)
	}
	out := f.ApplyBatch(entriesOf([]encoder{
		&Append{Now: 100, Messages: msgs},
		&Pull{Now: 100, Subject: "s", ConsumerGroup: "tags", Consumer: "c", Max: 10, Tags: []string{"odd"}, Start: StartEarliest},
		&Pull{Now: 100, Subject: "s", ConsumerGroup: "since", Consumer: "c", Max: 10, Start: StartAtTime, StartAt: 100},
	}))
	if got := consumeSeqs(out[1].(*PullResult)); !slices.Equal(got, []int64{1, 3, 5}) {
		t.Fatalf("tag-filtered pull in the batch of the append: %v, want 1, 3, 5", got)
	}
	if got := consumeSeqs(out[2].(*PullResult)); len(got) != 6 {
		t.Fatalf("a group started at the append's time, in its batch: %v, want all six", got)
	}
}

// entriesOf makes Raft entries of cmds, at indices 1, 2, …
func entriesOf(cmds []encoder) []*raft.Log {
	out := make([]*raft.Log, 0, len(cmds))
	for i, c := range cmds {
		out = append(out, unitEntry(uint64(i+1), c))
	}
	return out
}

package fsm

// Consumer commands at the bounds of what applying them may write.

import (
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// diskBytes returns the bytes of every file under dir, the FSM's buffers
// flushed first.
func diskBytes(t *testing.T, f *FSM) int64 {
	t.Helper()
	if err := f.store.flush(); err != nil {
		t.Fatal(err)
	}
	var n int64
	err := filepath.WalkDir(f.cfg.Dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A nack of a consumer's whole window (Config.MaxUnacked entries, its
// names as long as names go) writes a retry record per entry into the
// schedule: what it writes must be within what the replica made room for
// before applying it. Before, the bound was the entry's bytes twice and a
// fixed overhead, some 70 KB, for a nack that writes about 5 MB.
func TestNackOfAWholeWindowWritesWithinItsBound(t *testing.T) {
	for _, tc := range []struct {
		name    string
		retryAt func(now int64) int64
		expire  bool
		ack     bool
	}{
		{name: "nack-in-an-hour", retryAt: func(now int64) int64 { return now + time.Hour.Milliseconds() }},
		{name: "nack-in-two-years", retryAt: func(now int64) int64 { return now + maxRetryDelay }},
		{name: "nack-with-backoff", retryAt: func(int64) int64 { return 0 }},
		{name: "expire", expire: true},
		{name: "ack", ack: true}, // its timeline record: a run per sequence at worst
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := unitFSM(t)
			s, g, c := strings.Repeat("s", limits.MaxName), strings.Repeat("g", limits.MaxName), strings.Repeat("c", limits.MaxName)
			window := f.cfg.MaxUnacked
			msgs := make([]*message.Message, window)
			for i := range msgs {
				msgs[i] = unitMsg(fmt.Sprint("m", i), s, 1)
			}
			idx := uint64(1)
			now := rigStart
			appendAt(t, f, idx, now, msgs...)
			for pulled := 0; pulled < window; {
				idx++
				res := resultAs[*PullResult](t, applyAt(f, idx, &Pull{Now: now, Subject: s, ConsumerGroup: g, Consumer: c, Max: f.cfg.MaxPull, Start: StartEarliest}))
				if len(res.Entries) == 0 {
					t.Fatalf("window stops at %d entries", pulled)
				}
				pulled += len(res.Entries)
			}
			ranges := []message.AckRange{{First: 0, Last: int64(window - 1)}}
			var cmd encoder = &Nack{Now: now, Subject: s, ConsumerGroup: g, Consumer: c, RetryAt: 0, Ranges: ranges}
			if tc.retryAt != nil {
				cmd.(*Nack).RetryAt = tc.retryAt(now)
			}
			if tc.expire {
				now += DefaultConsumerGroupSettings().AckWait + 1
				cmd = &Expire{Now: now, Subject: s, ConsumerGroup: g, Consumer: c, Ranges: ranges}
			}
			if tc.ack {
				cmd = &Ack{Now: now, Subject: s, ConsumerGroup: g, Consumer: c, Ranges: ranges}
			}
			idx++
			e := unitEntry(idx, cmd)
			before := diskBytes(t, f)
			switch r := f.Apply(e).(type) {
			case *NackResult:
				if r.Retried != window {
					t.Fatalf("nack: %+v, want %d retried", r, window)
				}
			case *ExpireResult:
				if r.Expired != window {
					t.Fatalf("expire: %+v, want %d expired", r, window)
				}
			case *AckResult:
				if r.AckPos != int64(window) {
					t.Fatalf("ack: %+v, want the ack position at %d", r, window)
				}
			default:
				t.Fatalf("apply: %v", describe(r))
			}
			wrote, bound := diskBytes(t, f)-before, f.entryWrites(e)
			t.Logf("wrote %d bytes; bound %d", wrote, bound)
			if wrote > bound {
				t.Fatalf("applying the entry wrote %d bytes, over its bound of %d", wrote, bound)
			}
		})
	}
}

// The bound of a nack grows with the sequences it names, up to a window:
// a nack of one entry does not make a replica wait for room for a
// window's records, and a range as wide as an int64 neither overflows nor
// asks for more than a window (it would make the replica wait for ever).
func TestNackWritesBound(t *testing.T) {
	f := unitFSM(t, func(c *Config) { c.MaxUnacked = 100 })
	nack := func(ranges ...message.AckRange) []byte {
		return (&Nack{Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: ranges}).Encode()
	}
	many := make([]message.AckRange, limits.MaxAckRanges)
	for i := range many {
		many[i] = message.AckRange{First: int64(i), Last: int64(i)}
	}
	for _, tc := range []struct {
		name string
		data []byte
		want int64
	}{
		{"one", nack(message.AckRange{First: 7, Last: 7}), 1},
		{"under-a-window", nack(message.AckRange{First: 0, Last: 98}), 99},
		{"a-window", nack(message.AckRange{First: 0, Last: 99}), 100},
		{"over-a-window", nack(message.AckRange{First: 0, Last: 100}), 100},
		{"widest", nack(message.AckRange{First: 0, Last: math.MaxInt64}), 100},
		{"overlapping", nack(message.AckRange{First: 0, Last: 60}, message.AckRange{First: 0, Last: 60}), 100},
		{"4096-ranges", nack(many...), 100},
		{"backwards", nack(message.AckRange{First: 9, Last: 3}), 0},
		{"none", nack(), 0},
		{"truncated", nack(message.AckRange{First: 0, Last: 50})[:20], 0},
	} {
		if got := f.nackWrites(tc.data); got != tc.want*maxRetryRecordBytes {
			t.Errorf("%s: bound %d, want %d records of %d", tc.name, got, tc.want, maxRetryRecordBytes)
		}
	}
}

package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/test/testmsg"
	"github.com/qmqgo/qmq/transport"
)

func TestValidateRetention(t *testing.T) {
	base := DefaultConfig()
	base.ID, base.BrokerGroup, base.DataDir = "n1", "g1", t.TempDir()
	base.ClientAddr, base.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	segment, dedup := base.FSM.SegmentSize, base.FSM.DedupWindow.Milliseconds()
	if base.FSM.Retention != (logs.Retention{MaxAge: DefaultRetentionAge.Milliseconds()}) {
		t.Fatalf("default retention %+v", base.FSM.Retention)
	}
	for _, tc := range []struct {
		name string
		r    logs.Retention
		ok   bool
	}{
		{"none", logs.Retention{}, true},
		{"size at one segment", logs.Retention{MaxBytes: segment}, true},
		{"size just under", logs.Retention{MaxBytes: segment - 1}, false},
		{"size just over", logs.Retention{MaxBytes: segment + 1}, true},
		{"size negative", logs.Retention{MaxBytes: -1}, false},
		{"age at the dedup window", logs.Retention{MaxAge: dedup}, true},
		{"age just under", logs.Retention{MaxAge: dedup - 1}, false},
		{"age just over", logs.Retention{MaxAge: dedup + 1}, true},
		{"age of 1 ms", logs.Retention{MaxAge: 1}, false},
		{"age negative", logs.Retention{MaxAge: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.FSM.Retention = tc.r
			err := c.Validate()
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrRetention)) {
				t.Fatalf("Validate: %v (want accepted: %v)", err, tc.ok)
			}
		})
	}
}

// retentionNode starts a node on 1 MiB message-log segments (three of the
// messages below fit one) with retention r and clock now.
func retentionNode(t *testing.T, r logs.Retention, now func() time.Time) *Node {
	n := startNode(t, "n1", true, func(c *Config) {
		c.FSM.SegmentSize, c.FSM.IndexSegmentSize = 1<<20, 64<<10
		c.FSM.Retention, c.Now = r, now
	})
	waitLeader(t, n)
	return n
}

// sendBig sends messages first..last-1 of subject s, 256 KiB each.
func sendBig(t *testing.T, gc *transport.LeaderClient, first, last int) {
	t.Helper()
	for i := first; i < last; i++ {
		sendRaw(t, gc, testmsg.OfSize(fmt.Sprint("m", i), "s", 0, 256<<10))
	}
}

// retained returns the consume sequences of s below end whose messages
// the node still holds, failing on any error but retention's.
func retained(t *testing.T, n *Node, end int) []int {
	t.Helper()
	var kept []int
	for seq := range end {
		_, err := n.FSM().Message("s", int64(seq))
		switch {
		case err == nil:
			kept = append(kept, seq)
		case !errors.Is(err, logs.ErrRetained):
			t.Fatalf("message %d: %v", seq, err)
		}
	}
	return kept
}

// messageSegments returns the message log's segment files on disk.
func messageSegments(t *testing.T, n *Node) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(n.cfg.DataDir, "fsm", "data", "messages", "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// pullAll pulls what group g of subject s gets, acking as it goes, until a
// pull finds nothing, and returns the ids.
func pullAll(t *testing.T, gc *transport.LeaderClient, g string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ids []string
	var from int64
	var epoch uint64
	for {
		req := &transport.PullRequest{Subject: "s", ConsumerGroup: g, Consumer: "c", Max: 4, Wait: 50 * time.Millisecond, From: from, Epoch: epoch, Start: transport.StartEarliest}
		body, err := gc.Call(ctx, transport.TypePull, req.Encode())
		if err != nil {
			t.Fatalf("pull: %v", err)
		}
		resp, err := transport.DecodePullResponse(body)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Messages) == 0 {
			return ids
		}
		epoch = resp.Epoch
		for _, m := range resp.Messages {
			ids = append(ids, m.Message.ID)
			from = m.PullSeq + 1
		}
		ack := &transport.AckRequest{Subject: "s", ConsumerGroup: g, Consumer: "c", Epoch: epoch,
			Ranges: []message.AckRange{{First: resp.Messages[0].PullSeq, Last: from - 1}}}
		if _, err := gc.Call(ctx, transport.TypeAck, ack.Encode()); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
}

// idsFrom returns m<first>…m<last-1>.
func idsFrom(first, last int) []string {
	var ids []string
	for i := first; i < last; i++ {
		ids = append(ids, fmt.Sprint("m", i))
	}
	return ids
}

// A node configured with a size bound removes its oldest message-log
// segments as sends take the log past it; a consumer group that was
// behind skips what was removed and gets the rest.
func TestRetentionBySizeRemovesOldSegments(t *testing.T) {
	const maxBytes = 2 << 20
	n := retentionNode(t, logs.Retention{MaxBytes: maxBytes}, time.Now)
	gc := clientOf(t, n.ClientAddr())
	sendBig(t, gc, 0, 1)
	if got := pullAll(t, gc, "behind"); strings.Join(got, ",") != "m0" {
		t.Fatalf("the group's first pull got %v", got)
	}
	sendBig(t, gc, 1, 16) // 4 MiB: five sealed segments and the active one
	waitFor(t, 10*time.Second, "the oldest segments to be removed", func() bool {
		kept := retained(t, n, 16)
		return len(kept) > 0 && kept[0] > 1
	})
	kept := retained(t, n, 16)
	for i, seq := range kept {
		if seq != kept[0]+i {
			t.Fatalf("retained %v: not one run to the end", kept)
		}
	}
	if last := kept[len(kept)-1]; last != 15 {
		t.Fatalf("retained %v: the newest message is gone", kept)
	}
	var total int64
	files := messageSegments(t, n)
	for _, f := range files {
		if filepath.Base(f) == fmt.Sprintf("%020d.seg", 0) {
			t.Fatalf("the first segment file is still there: %s", f)
		}
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
	}
	if total > maxBytes+int64(64*len(files)) { // records within the bound, a small header each
		t.Fatalf("%d bytes in %d message segments on disk, over %d", total, len(files), maxBytes)
	}
	if got, want := pullAll(t, gc, "behind"), idsFrom(kept[0], 16); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the group behind pulled %v, want %v", got, want)
	}
}

// A node configured with an age bound removes, at its first send, the
// segments every message of which is older than the bound by the leader's
// clock: here messages stamped an hour ago, before a restart with the clock
// right.
func TestRetentionByAgeRemovesOldSegments(t *testing.T) {
	var behind atomic.Int64 // the node's clock: real time minus behind
	behind.Store(int64(time.Hour))
	clock := func() time.Time { return time.Now().Add(-time.Duration(behind.Load())) }
	n := retentionNode(t, logs.Retention{MaxAge: (10 * time.Minute).Milliseconds()}, clock)
	sendBig(t, clientOf(t, n.ClientAddr()), 0, 12) // four segments, stamped an hour ago
	if kept := retained(t, n, 12); len(kept) != 12 {
		t.Fatalf("retained %v before any is old", kept)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	behind.Store(0)
	r, err := New(n.cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	waitLeader(t, r)
	sendBig(t, clientOf(t, r.ClientAddr()), 12, 13)
	waitFor(t, 10*time.Second, "the old segments to be removed", func() bool {
		kept := retained(t, r, 13)
		return len(kept) > 0 && kept[0] > 0
	})
	// The segment the new message's follows has old messages only, but
	// is kept: its successor's first message is young.
	kept := retained(t, r, 13)
	if len(kept) > 4 || kept[len(kept)-1] != 12 {
		t.Fatalf("retained %v: want the last old segment's messages and the new one", kept)
	}
}

package server

// Consumer-group requests at the bounds of what a client can make the
// server hold.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// deadLetterRig sends n messages of size bytes to subject "blobs" and
// makes each a dead letter of group "g" (one delivery, then a nack);
// mutate, if any, changes each message before it is sent.
func deadLetterRig(t *testing.T, ctx context.Context, gc *transport.LeaderClient, n, size int, mutate ...func(*message.Message)) {
	t.Helper()
	one := uint32(1)
	set, _ := json.Marshal(transport.SetConsumerGroupRequest{Subject: "blobs", ConsumerGroup: "g", MaxDeliveries: &one, Start: transport.StartEarliest})
	if _, err := gc.Call(ctx, transport.TypeSetConsumerGroup, set); err != nil {
		t.Fatal(err)
	}
	sendBlobs(t, ctx, gc, n, size, mutate...)
	req := transport.PullRequest{Subject: "blobs", ConsumerGroup: "g", Consumer: "c", Max: 1, Wait: time.Second}
	pullEach(t, ctx, gc, req, n, func(_ int, resp *transport.PullResponse) {
		for _, m := range resp.Messages {
			nack := &transport.NackRequest{Subject: "blobs", ConsumerGroup: "g", Consumer: "c", Epoch: resp.Epoch,
				Ranges: []message.AckRange{{First: m.PullSeq, Last: m.PullSeq}}}
			if _, err := gc.Call(ctx, transport.TypeNack, nack.Encode()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A page of dead letters names each one's message by id, tags and size,
// and holds nothing of the messages it read once it has those: with 3 MiB
// of budget, listing six dead letters of 1 MiB answers. Before, the page
// held every message's bytes until it was written, so that its fourth
// message waited for budget only the page itself held, for ever, and
// every other request of every client waited with it.
func TestDeadLetterPageHoldsNoMessage(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) { c.ClientLimits.Memory = 3 << 20 })
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gc := clientOf(t, n.ClientAddr())
	deadLetterRig(t, ctx, gc, 6, 1<<20)
	list, _ := json.Marshal(transport.DeadLettersRequest{Subject: "blobs", ConsumerGroup: "g"})
	call, end := context.WithTimeout(ctx, 10*time.Second)
	defer end()
	body, err := gc.Call(call, transport.TypeDeadLetters, list)
	if err != nil {
		t.Fatalf("listing six dead letters of 1 MiB with 3 MiB of budget: %v", err)
	}
	var page transport.DeadLetterPage
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	if page.Total != 6 || len(page.Letters) != 6 {
		t.Fatalf("page: total %d, %d letters; want 6 and 6", page.Total, len(page.Letters))
	}
	for i, d := range page.Letters {
		if d.ID != fmt.Sprint("big-", i) || d.Size < 1<<20 || d.Body != nil {
			t.Fatalf("letter %d: id %q, size %d, %d body bytes", i, d.ID, d.Size, len(d.Body))
		}
	}
	// The budget is whole again: a send goes through.
	m := &message.Message{ID: "after", Subject: "blobs", CreatedAt: 1, Body: make([]byte, 1<<20)}
	if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: []*message.Message{m}}).Encode()); err != nil {
		t.Fatal(err)
	}
}

// A listing of every consumer group of a broker group that would not fit
// a frame is refused, TOO_LARGE, naming what to do instead, and a
// subject's listing (at most limits.MaxConsumerGroupsPerSubject groups)
// always fits. Before, the broker wrote a reply of some 50 MiB for 65,536
// groups, over the frame limit: the client dropped the connection.
func TestGroupsListingIsBounded(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const subjects = limits.MaxConsumerGroups / limits.MaxConsumerGroupsPerSubject // every group a broker group may have
	name := func(c byte, i int) string { return fmt.Sprintf("%c%0*d", c, limits.MaxName-1, i) }
	work := make(chan *fsm.SetConsumerGroup)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for cmd := range work {
				cmd.Now = n.clock.now().UnixMilli()
				if _, err := n.propose(ctx, cmd.Encode()); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for s := range subjects {
		for g := range limits.MaxConsumerGroupsPerSubject {
			work <- &fsm.SetConsumerGroup{Subject: name('s', s), ConsumerGroup: name('g', g)}
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	gc := clientOf(t, n.ClientAddr())
	all, _ := json.Marshal(transport.ConsumerGroupsRequest{})
	call, end := context.WithTimeout(ctx, 30*time.Second) // a retried oversized reply would take all of ctx
	defer end()
	if _, err := gc.Call(call, transport.TypeConsumerGroups, all); transport.CodeOf(err) != transport.TooLarge || !strings.Contains(err.Error(), "subject") {
		t.Fatalf("listing %d groups of long names: %v, want TOO_LARGE naming a subject's listing", subjects*limits.MaxConsumerGroupsPerSubject, err)
	}
	one, _ := json.Marshal(transport.ConsumerGroupsRequest{Subject: name('s', 0)})
	body, err := gc.Call(ctx, transport.TypeConsumerGroups, one)
	if err != nil {
		t.Fatalf("listing a subject's %d groups: %v", limits.MaxConsumerGroupsPerSubject, err)
	}
	var infos []transport.ConsumerGroupInfo
	if err := json.Unmarshal(body, &infos); err != nil || len(infos) != limits.MaxConsumerGroupsPerSubject {
		t.Fatalf("a subject's listing: %d groups (%v)", len(infos), err)
	}
	t.Logf("a subject's listing of %d groups: %d bytes", len(infos), len(body))
}

// A dead letter whose message is too large to read whole in a JSON reply
// (a body of message.MaxBodyLen grows by a third in base64, and property
// values of control bytes sixfold as JSON escapes) is refused TOO_LARGE,
// saying so, and listed like any other. Before, the broker wrote a reply
// over the frame limit: the client dropped the connection and retried
// until its deadline.
func TestDeadLetterTooLargeToReadWhole(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gc := clientOf(t, n.ClientAddr())
	value := strings.Repeat("\x01", message.MaxPropertyVal)
	deadLetterRig(t, ctx, gc, 1, message.MaxBodyLen, func(m *message.Message) {
		for i := range 100 {
			m.Properties = append(m.Properties, message.Property{Key: fmt.Sprint("p", i), Value: value})
		}
	})
	seq := int64(0)
	one, _ := json.Marshal(transport.DeadLettersRequest{Subject: "blobs", ConsumerGroup: "g", Seq: &seq})
	call, end := context.WithTimeout(ctx, 30*time.Second)
	defer end()
	if _, err := gc.Call(call, transport.TypeDeadLetters, one); transport.CodeOf(err) != transport.TooLarge {
		t.Fatalf("reading a dead letter of %d bytes whole: %v, want TOO_LARGE", message.MaxBodyLen, err)
	}
	list, _ := json.Marshal(transport.DeadLettersRequest{Subject: "blobs", ConsumerGroup: "g"})
	body, err := gc.Call(ctx, transport.TypeDeadLetters, list)
	if err != nil {
		t.Fatal(err)
	}
	var page transport.DeadLetterPage
	if err := json.Unmarshal(body, &page); err != nil || len(page.Letters) != 1 || page.Letters[0].Size < message.MaxBodyLen {
		t.Fatalf("listing it: %d letters (%v)", len(page.Letters), err)
	}
}

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// lookupNode starts a one-node group holding n messages of subject "s",
// the i-th with id "m<i>", and every third tagged "t".
func lookupNode(t testing.TB, n int) *Node {
	t.Helper()
	node := startNode(t, "n1", true, nil)
	waitLeader(t, node)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &transport.SendRequest{}
	for i := range n {
		m := &message.Message{ID: fmt.Sprintf("m%d", i), Subject: "s", CreatedAt: 1, Body: []byte(strings.Repeat("b", i))}
		if i%3 == 0 {
			m.Tags = []string{"t"}
		}
		req.Messages = append(req.Messages, m)
	}
	if _, err := clientOf(t, node.ClientAddr()).Call(ctx, transport.TypeSend, req.Encode()); err != nil {
		t.Fatal(err)
	}
	return node
}

func messagesCall(t testing.TB, n *Node, req transport.MessagesRequest) (*transport.MessagesPage, error) {
	t.Helper()
	b, _ := json.Marshal(req)
	out, err := n.handleMessages(context.Background(), b)
	if err != nil {
		return nil, err
	}
	var page transport.MessagesPage
	if err := json.Unmarshal(out, &page); err != nil {
		t.Fatalf("answer %q: %v", out, err)
	}
	return &page, nil
}

// A lookup by id finds the message with its place and, asked, its body;
// a listing pages through a subject and filters by tag; requests past
// their bounds are refused as INVALID and answer nothing.
func TestMessagesRequest(t *testing.T) {
	n := lookupNode(t, 30)
	page, err := messagesCall(t, n, transport.MessagesRequest{ID: "m7", Body: true})
	if err != nil || len(page.Messages) != 1 {
		t.Fatalf("lookup of m7: %+v, %v", page, err)
	}
	if m := page.Messages[0]; m.ID != "m7" || m.Seq != 7 || string(m.Body) != strings.Repeat("b", 7) || m.BrokerGroup != "g1" || m.RaftIndex == 0 {
		t.Errorf("lookup of m7 answered %+v", m)
	}
	if page, err := messagesCall(t, n, transport.MessagesRequest{ID: "m7"}); err != nil || len(page.Messages) != 1 || page.Messages[0].Body != nil {
		t.Errorf("lookup without bodies: %+v, %v", page, err)
	}
	if page, err := messagesCall(t, n, transport.MessagesRequest{ID: "nope"}); err != nil || len(page.Messages) != 0 {
		t.Errorf("lookup of a missing id: %+v, %v (want an empty answer)", page, err)
	}

	seen := 0
	from := int64(0)
	for from >= 0 {
		page, err := messagesCall(t, n, transport.MessagesRequest{Subject: "s", FromSeq: &from, Limit: 4, Tag: "t"})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.Messages {
			if m.Seq%3 != 0 {
				t.Errorf("tag filter answered seq %d", m.Seq)
			}
		}
		if page.End != 30 {
			t.Errorf("a page from %d: end %d, want the consume log's end 30", from, page.End)
		}
		seen += len(page.Messages)
		from = page.Next
	}
	if seen != 10 {
		t.Errorf("paging with the tag filter saw %d messages, want 10", seen)
	}
	past := int64(40)
	if page, err := messagesCall(t, n, transport.MessagesRequest{Subject: "s", FromSeq: &past}); err != nil || page.End != 30 || page.Next != -1 {
		t.Errorf("a listing past the end: %+v, %v, want end 30", page, err)
	}
	if page, err := messagesCall(t, n, transport.MessagesRequest{Subject: "unknown", FromSeq: &past}); err != nil || page.End != 0 {
		t.Errorf("a listing of an unknown subject: %+v, %v, want no end", page, err)
	}

	zero := int64(0)
	for _, bad := range []transport.MessagesRequest{
		{ID: strings.Repeat("x", message.MaxIDLen+1)},
		{ID: "m1", Subject: "s"},
		{Subject: "s"},                // no start
		{Subject: "", FromSeq: &zero}, // no subject
		{Subject: "s", FromSeq: &zero, Limit: limits.MaxQueryResults + 1},
		{Subject: "s", FromSeq: &zero, Budget: limits.MaxScanBudget + 1},
		{Subject: "s", Since: time.UnixMilli(5), Until: time.UnixMilli(5)},
		{Subject: "s", FromSeq: &zero, Property: &transport.Property{Value: "v"}},                    // no property name
		{Subject: "s", FromSeq: &zero, Property: &transport.Property{Key: strings.Repeat("p", 257)}}, // over its length
		{ID: "m1", Property: &transport.Property{Key: "p", Value: "v"}},                              // not by id
	} {
		if _, err := messagesCall(t, n, bad); transport.CodeOf(err) != transport.Invalid {
			t.Errorf("%+v: %v, want INVALID", bad, err)
		}
	}
	if page, err := messagesCall(t, n, transport.MessagesRequest{Subject: "s", FromSeq: &zero, Limit: limits.MaxQueryResults}); err != nil || len(page.Messages) != 30 {
		t.Errorf("a listing at the limit: %v, %v", page, err)
	}
}

// FuzzMessagesRequest: any payload is answered or refused, never a crash,
// and an answer never holds more than the limit it names.
func FuzzMessagesRequest(f *testing.F) {
	seed := func(v transport.MessagesRequest) { b, _ := json.Marshal(v); f.Add(b) }
	zero, big := int64(0), int64(1<<62)
	seed(transport.MessagesRequest{ID: "m1", Body: true})
	seed(transport.MessagesRequest{ID: "m1", Timeline: true})
	seed(transport.MessagesRequest{Subject: "s", FromSeq: &zero, Timeline: true})
	seed(transport.MessagesRequest{Subject: "s", FromSeq: &zero, Limit: 3, Tag: "t", Body: true})
	seed(transport.MessagesRequest{Subject: "s", FromSeq: &big})
	seed(transport.MessagesRequest{Subject: "s", Since: time.UnixMilli(1), Until: time.UnixMilli(1 << 50), Key: "k", Budget: 1})
	seed(transport.MessagesRequest{Subject: "s", FromSeq: &zero, Property: &transport.Property{Key: "p", Value: "v"}})
	f.Add([]byte(`{"subject":"s","since":"-0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"subject":"s","from_seq":-1}`))
	f.Add([]byte("{"))
	n := lookupNode(quietTB{f}, 10)
	f.Fuzz(func(t *testing.T, payload []byte) {
		out, err := n.handleMessages(context.Background(), payload)
		if err != nil {
			if transport.CodeOf(err) == transport.Internal {
				t.Fatalf("%q: an internal error: %v", payload, err)
			}
			return
		}
		var req transport.MessagesRequest
		var page transport.MessagesPage
		if json.Unmarshal(payload, &req) != nil || json.Unmarshal(out, &page) != nil {
			t.Fatalf("%q answered %q", payload, out)
		}
		limit := req.Limit
		if limit == 0 {
			limit = max(defaultLookupLimit, maxLookupByID)
		}
		if len(page.Messages) > limit {
			t.Fatalf("%q answered %d messages", payload, len(page.Messages))
		}
		if req.ID == "" && req.Timeline {
			t.Fatalf("%q: a listing with timelines answered %q", payload, out)
		}
		for _, m := range page.Messages {
			if m.Timeline != nil && !req.Timeline || len(m.Timeline) > limits.MaxTimelineEvents {
				t.Fatalf("%q answered a timeline of %d events", payload, len(m.Timeline))
			}
		}
		if len(out) > maxLookupReply+1<<10 {
			t.Fatalf("%q answered %d bytes", payload, len(out))
		}
	})
}

// The node's HTTP port serves the console at / and its API beside
// /status and /metrics: a message looked up there is the one stored.
func TestHTTPPortServesTheConsole(t *testing.T) {
	n := lookupNode(t, 3)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get("/"); st != 200 || !strings.Contains(body, "<script") {
		t.Errorf("GET /: %d %.200s", st, body)
	}
	if st, body := get("/api/v1/messages/m2?body=1"); st != 200 || !strings.Contains(body, `"id":"m2"`) || !strings.Contains(body, `"seq":2`) {
		t.Errorf("GET /api/v1/messages/m2: %d %.300s", st, body)
	}
	if st, body := get("/status"); st != 200 || !strings.Contains(body, `"state"`) {
		t.Errorf("GET /status: %d %.200s", st, body)
	}
}

// A message whose JSON would not fit a frame (its properties all '<',
// which JSON escapes to six bytes each) is answered without its body and
// properties, said so, rather than in a reply the client would refuse.
func TestMessagesReplyFitsAFrame(t *testing.T) {
	n := lookupNode(t, 1)
	big := &message.Message{ID: "big", Subject: "s", CreatedAt: 1, Body: []byte("b")}
	for i := range 100 {
		big.Properties = append(big.Properties, message.Property{Key: fmt.Sprint("p", i), Value: strings.Repeat("<", 60<<10)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := clientOf(t, n.ClientAddr()).Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: []*message.Message{big}}).Encode()); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(transport.MessagesRequest{ID: "big", Body: true})
	out, err := n.handleMessages(context.Background(), b)
	if err != nil || len(out) > limits.MaxFrame-limits.Envelope {
		t.Fatalf("lookup: %d bytes, %v", len(out), err)
	}
	var page transport.MessagesPage
	if err := json.Unmarshal(out, &page); err != nil || len(page.Messages) != 1 || !page.Messages[0].BodyOmitted || page.Messages[0].Body != nil {
		t.Fatalf("lookup of a message too large for a reply: %+v, %v", page.Messages, err)
	}
	// A listing with bodies: the small message, then the large one alone
	// on its page without its body.
	zero := int64(0)
	p1, err := messagesCall(t, n, transport.MessagesRequest{Subject: "s", FromSeq: &zero, Body: true})
	if err != nil || len(p1.Messages) != 1 || p1.Messages[0].ID != "m0" || p1.Next != 1 {
		t.Fatalf("first page: %+v, %v", p1, err)
	}
	p2, err := messagesCall(t, n, transport.MessagesRequest{Subject: "s", FromSeq: &p1.Next, Body: true})
	if err != nil || len(p2.Messages) != 1 || !p2.Messages[0].BodyOmitted || p2.Next != -1 {
		t.Fatalf("second page: %+v, %v", p2, err)
	}
}

// A lookup by id asked for its timeline answers what happened to the
// message: sent, then handed out to the consumer of its group, then
// acked, oldest first, with the group and consumer of each consumer's
// event and the raft index of each; without asking, none. A listing
// cannot ask for timelines.
func TestMessagesTimeline(t *testing.T) {
	n := lookupNode(t, 3)
	gc := clientOf(t, n.ClientAddr())
	if got := pullOnce(t, gc, "billing", 1, 1); got != 1 {
		t.Fatalf("pulled %d messages, want 1", got)
	}
	zero := int64(0)
	if _, err := messagesCall(t, n, transport.MessagesRequest{Subject: "s", FromSeq: &zero, Timeline: true}); transport.CodeOf(err) != transport.Invalid || !strings.Contains(err.Error(), "by id") {
		t.Errorf("a listing with timelines: %v, want INVALID saying to look up by id", err)
	}
	if page, err := messagesCall(t, n, transport.MessagesRequest{ID: "m0"}); err != nil || len(page.Messages) != 1 || page.Messages[0].Timeline != nil {
		t.Fatalf("lookup without a timeline: %+v, %v", page, err)
	}
	page, err := messagesCall(t, n, transport.MessagesRequest{ID: "m0", Timeline: true})
	if err != nil || len(page.Messages) != 1 {
		t.Fatalf("lookup with its timeline: %+v, %v", page, err)
	}
	m := page.Messages[0]
	var kinds []string
	for _, e := range m.Timeline {
		kinds = append(kinds, e.Kind)
	}
	if strings.Join(kinds, ",") != "sent,handed-out,acked" || m.TimelineMore {
		t.Fatalf("timeline of m0: %+v (more %v), want sent, handed-out, acked", m.Timeline, m.TimelineMore)
	}
	sent, out, acked := m.Timeline[0], m.Timeline[1], m.Timeline[2]
	if sent.RaftIndex != m.RaftIndex || sent.ConsumerGroup != "" || sent.At.Sub(m.AppendedAt).Abs() > time.Minute {
		t.Errorf("sent: %+v (the message's raft index %d)", sent, m.RaftIndex)
	}
	if out.ConsumerGroup != "billing" || out.Consumer != "c" || out.Delivery != 1 || out.RaftIndex <= sent.RaftIndex {
		t.Errorf("handed out: %+v", out)
	}
	if acked.ConsumerGroup != "billing" || acked.Consumer != "c" || acked.RaftIndex <= out.RaftIndex || acked.At.Before(sent.At) {
		t.Errorf("acked: %+v", acked)
	}
}

// fitMessage keeps what fits a reply's room: the whole message, else
// without its body, else with the oldest events of its timeline that
// fit (perhaps none), saying there are more; never more than the room.
func TestFitMessageTrimsTheTimeline(t *testing.T) {
	m := transport.StoredMessage{BrokerGroup: "g1", Subject: "s", ID: "m", Body: []byte(strings.Repeat("b", 4000)),
		Properties: []transport.Property{{Key: "k", Value: "v"}}}
	for i := range 200 {
		m.Timeline = append(m.Timeline, transport.Event{Kind: "handed-out", At: time.UnixMilli(int64(i)).UTC(),
			RaftIndex: uint64(i + 1), ConsumerGroup: strings.Repeat("g", 50), Consumer: "c", Delivery: i + 1})
	}
	whole, _ := json.Marshal(m)
	noBody := m
	noBody.Body, noBody.Properties, noBody.BodyOmitted = nil, nil, true
	bare, _ := json.Marshal(noBody)
	first := noBody
	first.Timeline, first.TimelineMore = m.Timeline[:1], true
	one, _ := json.Marshal(first)

	if b, ok := fitMessage(m, len(whole)); !ok || len(b) > len(whole) {
		t.Errorf("room for it whole: %d bytes, %v", len(b), ok)
	}
	if b, ok := fitMessage(m, len(bare)); !ok || string(b) != string(bare) {
		t.Errorf("room without its body: %.200s, %v", b, ok)
	}
	for _, room := range []int{len(one), len(one) + 1, len(bare) / 2, len(bare) - 1} {
		b, ok := fitMessage(m, room)
		var got transport.StoredMessage
		if !ok || len(b) > room || json.Unmarshal(b, &got) != nil {
			t.Fatalf("room %d: %d bytes, %v", room, len(b), ok)
		}
		if len(got.Timeline) == 0 || len(got.Timeline) == len(m.Timeline) || !got.TimelineMore || !got.BodyOmitted || got.Body != nil {
			t.Fatalf("room %d: %d events, more %v, body omitted %v", room, len(got.Timeline), got.TimelineMore, got.BodyOmitted)
		}
		if got.Timeline[0].RaftIndex != 1 {
			t.Errorf("room %d: starts at event %d, want the oldest", room, got.Timeline[0].RaftIndex)
		}
		// The longest prefix that fits: one event more would not.
		next := got
		next.Timeline = m.Timeline[:len(got.Timeline)+1]
		if b2, _ := json.Marshal(next); len(b2) <= room {
			t.Errorf("room %d: kept %d events, but %d fit", room, len(got.Timeline), len(next.Timeline))
		}
	}
	// Room for the message but no event: described, its timeline left
	// out and said to have more; less room, not answered.
	none := noBody
	none.Timeline, none.TimelineMore = nil, true
	zero, _ := json.Marshal(none)
	if b, ok := fitMessage(m, len(one)-1); !ok || string(b) != string(zero) {
		t.Errorf("room for no event: %s, %v; want %s", b, ok, zero)
	}
	if b, ok := fitMessage(m, len(zero)-1); ok {
		t.Errorf("room for less than the message: answered %d bytes", len(b))
	}
	// Without a timeline, a message that does not fit without its body is
	// not answered.
	m.Timeline = nil
	if b, ok := fitMessage(m, 50); ok {
		t.Errorf("a message without its timeline in 50 bytes: %s", b)
	}
}

// Every replica tells a message's timeline alike, byte for byte, from its
// own copy of the replicated record: who sent it and from where, the
// hand-outs, the nack with its retry time, the ack.
func TestTimelineSameOnEveryReplica(t *testing.T) {
	nodes := startGroup(t)
	gc := clientOf(t, clientAddrs(nodes)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := &transport.SendRequest{Messages: []*message.Message{{ID: "m0", Subject: "s", CreatedAt: 1}}}
	if _, err := gc.Call(ctx, transport.TypeSend, send.Encode()); err != nil {
		t.Fatal(err)
	}
	pull := func() *transport.PullResponse {
		t.Helper()
		req := &transport.PullRequest{Subject: "s", ConsumerGroup: "billing", Consumer: "c", Max: 1, Wait: time.Second, Start: transport.StartEarliest}
		body, err := gc.Call(ctx, transport.TypePull, req.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := transport.DecodePullResponse(body)
		if err != nil || len(resp.Messages) != 1 {
			t.Fatalf("pull: %+v, %v", resp, err)
		}
		return resp
	}
	first := pull()
	ranges := []message.AckRange{{First: first.Messages[0].PullSeq, Last: first.Messages[0].PullSeq}}
	nack := &transport.NackRequest{Subject: "s", ConsumerGroup: "billing", Consumer: "c", Epoch: first.Epoch, Ranges: ranges, RetryAt: time.Now()}
	if _, err := gc.Call(ctx, transport.TypeNack, nack.Encode()); err != nil {
		t.Fatal(err)
	}
	second := pull()
	ranges = []message.AckRange{{First: second.Messages[0].PullSeq, Last: second.Messages[0].PullSeq}}
	ack := &transport.AckRequest{Subject: "s", ConsumerGroup: "billing", Consumer: "c", Epoch: second.Epoch, Ranges: ranges}
	if _, err := gc.Call(ctx, transport.TypeAck, ack.Encode()); err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(nodes)
	waitFor(t, 10*time.Second, "every replica to apply the ack", func() bool {
		for _, n := range nodes {
			if n.fsm.Applied() != leader.fsm.Applied() {
				return false
			}
		}
		return true
	})
	var want []byte
	for _, n := range nodes {
		page, err := messagesCall(t, n, transport.MessagesRequest{ID: "m0", Timeline: true})
		if err != nil || len(page.Messages) != 1 {
			t.Fatalf("%s: %+v, %v", n.cfg.ID, page, err)
		}
		tl := page.Messages[0].Timeline
		var kinds []string
		for _, e := range tl {
			kinds = append(kinds, e.Kind)
		}
		if strings.Join(kinds, ",") != "sent,handed-out,nacked,handed-out,acked" {
			t.Fatalf("%s: timeline %+v", n.cfg.ID, tl)
		}
		if !strings.HasPrefix(tl[0].ClientAddress, "127.0.0.1:") || tl[2].Due.IsZero() || tl[3].Delivery != 2 {
			t.Fatalf("%s: sent %+v, nacked %+v, second hand-out %+v", n.cfg.ID, tl[0], tl[2], tl[3])
		}
		got, _ := json.Marshal(tl)
		if want == nil {
			want = got
		} else if string(got) != string(want) {
			t.Fatalf("%s tells another timeline:\n%s\nwant\n%s", n.cfg.ID, got, want)
		}
	}
}

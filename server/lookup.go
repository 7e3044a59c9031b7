package server

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/logs"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// Message lookups for operators: by id, or a subject's messages by time
// or from a sequence. They read this node's replica and change nothing.

// maxLookupRead bounds the message bytes one lookup reads (the record
// sizes of what it found; it reads at least one message).
const maxLookupRead = 4 << 20

// maxLookupByID bounds the messages one lookup by id answers: an id is
// unique within the dedup window only, so a producer that reuses ids may
// have many messages of one.
const maxLookupByID = 100

// handleMessages answers a MessagesRequest from this node's replica. An
// application reads the messages of the subjects it may use (send to or
// consume): a listing of another subject is refused, and a lookup by id
// leaves another subject's messages out, as if not found.
func (n *Node) handleMessages(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.MessagesRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	acc := accessOf(ctx)
	// The bytes the reply may read are taken from the client listener's
	// memory budget while it is built and written.
	if err := transport.Reserve(ctx, maxLookupReserve); err != nil {
		return nil, err
	}
	page := &transport.MessagesPage{BrokerGroup: n.cfg.BrokerGroup, Next: -1} // its messages are encoded one by one, below
	var found []fsm.StoredMessage
	if req.ID != "" {
		if len(req.ID) > message.MaxIDLen {
			return nil, transport.Errorf(transport.Invalid, "message id of %d bytes (at most %d)", len(req.ID), message.MaxIDLen)
		}
		if req.Subject != "" || req.FromSeq != nil || !req.Since.IsZero() || !req.Until.IsZero() || req.Tag != "" || req.Key != "" || req.Property != nil {
			return nil, transport.Errorf(transport.Invalid, "a lookup by id takes no subject, window, tag, key or property")
		}
		all, err := n.fsm.FindMessage(req.ID, maxLookupByID, maxLookupRead)
		if err != nil {
			return nil, lookupError(err)
		}
		for _, m := range all {
			if acc.mayRead(m.Message.Subject) {
				found = append(found, m)
			}
		}
	} else {
		if req.Timeline {
			return nil, transport.Errorf(transport.Invalid, "a listing has no timelines: look a message up by id for its timeline")
		}
		q, err := messageQuery(req)
		if err != nil {
			return nil, err
		}
		if err := acc.read(req.Subject); err != nil {
			return nil, err
		}
		res, err := n.fsm.QueryMessages(q)
		if err != nil {
			return nil, lookupError(err)
		}
		found, page.Next, page.Scanned, page.Truncated, page.End = res.Messages, res.Next, res.Scanned, res.Truncated, res.End
	}
	// Each message is encoded on its own, so that the reply is bounded by
	// what it will take on the wire (base64 bodies and escaped strings
	// grow), not by its records' sizes.
	var msgs []json.RawMessage
	total := 0
	for _, m := range found {
		out := storedMessage(n.cfg.BrokerGroup, m)
		if req.Body {
			out.Body = m.Message.Body
			for _, p := range m.Message.Properties {
				out.Properties = append(out.Properties, transport.Property{Key: p.Key, Value: p.Value})
			}
		}
		if req.Timeline {
			// A timeline that cannot be read costs the message its
			// timeline, not the lookup.
			if events, more, err := n.fsm.Timeline(m, limits.MaxTimelineEvents); err != nil {
				out.TimelineError = err.Error()
			} else {
				out.Timeline, out.TimelineMore = timelineEvents(events), more
			}
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, transport.Errorf(transport.Internal, "message lookup: %v", err)
		}
		if total+len(b) > maxLookupReply {
			if req.ID == "" && len(msgs) > 0 {
				page.Next, page.Truncated = m.Seq, false // the rest on the next page
				break
			}
			var ok bool
			if b, ok = fitMessage(out, maxLookupReply-total); !ok {
				break
			}
		}
		total += len(b)
		msgs = append(msgs, b)
	}
	reply, err := json.Marshal(struct {
		*transport.MessagesPage
		Messages []json.RawMessage `json:"messages"`
	}{page, append([]json.RawMessage{}, msgs...)})
	// Built: only the reply stays until it is written.
	transport.Release(ctx, maxLookupReserve-int64(len(reply)))
	return reply, err
}

// maxLookupReserve is what a lookup takes of the listener's memory while
// it builds its reply: what it may read, and the reply.
const maxLookupReserve = maxLookupRead + limits.MaxFrame

// fitMessage encodes a message that does not fit a reply's room as it
// fits: without its body and properties (BodyOmitted, if it had them);
// if it still does not fit, with the oldest events of its timeline that
// fit (TimelineMore). ok is false when it does not fit even so.
func fitMessage(out transport.StoredMessage, room int) (b []byte, ok bool) {
	if out.Body != nil || out.Properties != nil {
		out.Body, out.Properties, out.BodyOmitted = nil, nil, true
	}
	encode := func(m transport.StoredMessage) []byte {
		b, err := json.Marshal(m)
		if err != nil { // not for these types; counted as not fitting
			return nil
		}
		return b
	}
	if b = encode(out); b != nil && len(b) <= room {
		return b, true
	}
	// A longer prefix of the timeline never encodes shorter: the first
	// that does not fit is found by bisection.
	events := out.Timeline
	fits := func(k int) bool {
		m := out
		m.Timeline, m.TimelineMore = events[:k], true
		b := encode(m)
		return b != nil && len(b) <= room
	}
	k := sort.Search(len(events)+1, func(k int) bool { return !fits(k) })
	if k == 0 {
		return nil, false
	}
	out.Timeline, out.TimelineMore = events[:k-1], true
	if b = encode(out); b == nil {
		return nil, false
	}
	return b, true
}

// timelineEvents is a timeline as the wire carries it.
func timelineEvents(events []fsm.Event) []transport.Event {
	if events == nil {
		return nil
	}
	out := make([]transport.Event, len(events))
	for i, e := range events {
		out[i] = transport.Event{Kind: e.Kind.String(), At: time.UnixMilli(e.At).UTC(), RaftIndex: e.Index,
			App: e.App, ClientAddress: e.Addr, ConsumerGroup: e.Group, Consumer: e.Consumer, Delivery: e.Delivery}
		if e.Due != 0 {
			out[i].Due = time.UnixMilli(e.Due).UTC()
		}
	}
	return out
}

// maxLookupReply bounds a lookup's reply: a frame, less its envelope and
// room for the page's own fields.
const maxLookupReply = limits.MaxFrame - limits.Envelope - 1<<10

// messageQuery turns a listing request into the state machine's query,
// checking what the state machine does not.
func messageQuery(req transport.MessagesRequest) (fsm.MessageQuery, error) {
	if err := fsm.CheckName("subject", req.Subject); err != nil {
		return fsm.MessageQuery{}, transport.Errorf(transport.Invalid, "%v", err)
	}
	q := fsm.MessageQuery{Subject: req.Subject, FromSeq: -1, Tag: req.Tag, Key: req.Key,
		Limit: req.Limit, Budget: req.Budget, MaxBytes: maxLookupRead}
	if p := req.Property; p != nil {
		if p.Key == "" {
			return q, transport.Errorf(transport.Invalid, "a property filter names its property (key)")
		}
		q.Property, q.PropertyValue = p.Key, p.Value
	}
	if q.Limit == 0 {
		q.Limit = defaultLookupLimit
	}
	switch {
	case req.FromSeq != nil:
		if *req.FromSeq < 0 {
			return q, transport.Errorf(transport.Invalid, "from sequence %d (at least 0)", *req.FromSeq)
		}
		q.FromSeq = *req.FromSeq
	case req.Since.IsZero():
		return q, transport.Errorf(transport.Invalid, "a listing needs a start: a time (since) or a sequence (from_seq)")
	}
	if !req.Since.IsZero() {
		q.Since = req.Since.UnixMilli()
	}
	if !req.Until.IsZero() {
		q.Until = req.Until.UnixMilli()
	}
	return q, nil
}

// defaultLookupLimit is how many messages a listing answers unless it says.
const defaultLookupLimit = 100

// lookupError is a lookup's failure as the client sees it: a bad request
// is INVALID, an index still being built after the node started
// UNAVAILABLE (ask again, or another node), anything else the node's fault.
func lookupError(err error) error {
	if errors.Is(err, fsm.ErrInvalid) {
		return transport.Errorf(transport.Invalid, "%v", err)
	}
	if errors.Is(err, logs.ErrIndexBuilding) {
		return transport.Errorf(transport.Unavailable, "%v", err)
	}
	return transport.Errorf(transport.Internal, "message lookup: %v", err)
}

// storedMessage describes m, without its body and properties.
func storedMessage(brokerGroup string, m fsm.StoredMessage) transport.StoredMessage {
	msg := m.Message
	out := transport.StoredMessage{BrokerGroup: brokerGroup, Subject: msg.Subject, ID: msg.ID, Seq: m.Seq,
		Offset: m.Offset, Size: m.Size, RaftIndex: msg.Index, Tags: msg.Tags, BodySize: len(msg.Body),
		CreatedAt: time.UnixMilli(msg.CreatedAt).UTC(), AppendedAt: time.UnixMilli(msg.AppendedAt).UTC()}
	for _, p := range msg.Properties {
		if p.Key == message.KeyProperty {
			out.Key = p.Value
		}
	}
	return out
}

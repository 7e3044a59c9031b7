package server

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// Message lookups for operators: by id, or a subject's messages by time
// or from a sequence. They read this node's replica and change nothing.

// maxLookupRead bounds the message bytes one lookup reads into its reply
// (it answers at least one message): the reply is JSON, whose base64
// bodies and escaped properties grow, and must fit a frame.
const maxLookupRead = 4 << 20

// maxLookupByID bounds the messages one lookup by id answers: an id is
// unique within the dedup window only, so a producer that reuses ids may
// have many messages of one.
const maxLookupByID = 100

// handleMessages answers a MessagesRequest from this node's replica.
func (n *Node) handleMessages(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.MessagesRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	// The bytes the reply may read are taken from the client listener's
	// memory budget while it is built and written.
	if err := transport.Reserve(ctx, maxLookupRead); err != nil {
		return nil, err
	}
	page := &transport.MessagesPage{BrokerGroup: n.cfg.BrokerGroup, Messages: []transport.StoredMessage{}, Next: -1}
	var found []fsm.StoredMessage
	if req.ID != "" {
		if len(req.ID) > message.MaxIDLen {
			return nil, transport.Errorf(transport.Invalid, "message id of %d bytes (at most %d)", len(req.ID), message.MaxIDLen)
		}
		if req.Subject != "" || req.FromSeq != nil || !req.Since.IsZero() || !req.Until.IsZero() || req.Tag != "" || req.Key != "" {
			return nil, transport.Errorf(transport.Invalid, "a lookup by id takes no subject, window, tag or key")
		}
		var err error
		if found, err = n.fsm.FindMessage(req.ID); err != nil {
			return nil, lookupError(err)
		}
		if len(found) > maxLookupByID {
			found = found[:maxLookupByID] // newest first
		}
	} else {
		q, err := messageQuery(req)
		if err != nil {
			return nil, err
		}
		res, err := n.fsm.QueryMessages(q)
		if err != nil {
			return nil, lookupError(err)
		}
		found, page.Next, page.Scanned, page.Truncated = res.Messages, res.Next, res.Scanned, res.Truncated
	}
	read := 0
	for i, m := range found {
		out := storedMessage(n.cfg.BrokerGroup, m)
		if req.Body {
			if read > 0 && read+m.Size > maxLookupRead {
				if req.ID == "" {
					// The rest on the next page.
					page.Next, page.Truncated = found[i].Seq, false
					break
				}
				out.BodyOmitted = true
			} else {
				read += m.Size
				out.Body = m.Message.Body
				for _, p := range m.Message.Properties {
					out.Properties = append(out.Properties, transport.Property{Key: p.Key, Value: p.Value})
				}
			}
		}
		page.Messages = append(page.Messages, out)
	}
	return json.Marshal(page)
}

// messageQuery turns a listing request into the state machine's query,
// checking what the state machine does not.
func messageQuery(req transport.MessagesRequest) (fsm.MessageQuery, error) {
	if err := fsm.CheckName("subject", req.Subject); err != nil {
		return fsm.MessageQuery{}, transport.Errorf(transport.Invalid, "%v", err)
	}
	q := fsm.MessageQuery{Subject: req.Subject, FromSeq: -1, Tag: req.Tag, Key: req.Key,
		Limit: req.Limit, Budget: req.Budget, MaxBytes: maxLookupRead}
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
// is INVALID, anything else the node's fault.
func lookupError(err error) error {
	if errors.Is(err, fsm.ErrInvalid) {
		return transport.Errorf(transport.Invalid, "%v", err)
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

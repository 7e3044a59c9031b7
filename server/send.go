package server

import (
	"context"
	"fmt"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

func (n *Node) handleSend(ctx context.Context, p []byte) ([]byte, error) {
	req, err := transport.DecodeSendRequest(p)
	if err != nil {
		return nil, err
	}
	size, acc := 0, accessOf(ctx)
	for i, m := range req.Messages {
		// Everything apply would refuse is refused here, before it costs a
		// Raft entry (the decoder checked the message limits already).
		if err := fsm.CheckMessage(m); err != nil {
			return nil, transport.Errorf(transport.Invalid, "message %d: %v", i, err)
		}
		size += len(req.Wire[i])
	}
	if len(req.Messages) == 0 {
		return (&transport.SendResponse{}).Encode(), nil
	}
	if !n.isLeader() {
		return nil, n.notLeader()
	}
	if refusal := n.sendRefusal(); refusal != nil {
		return n.refuseChecked(ctx, req.Messages, refusal)
	}
	if err := n.clockReady(ctx); err != nil {
		return nil, err
	}
	resp := &transport.SendResponse{Results: make([]transport.SendResult, len(req.Messages))}
	// A delivery time too far ahead is refused here, per message.
	limit := n.clock.now().Add(n.cfg.MaxDelay).UnixMilli()
	var accepted []*message.Message
	var wire [][]byte // wire[j] encodes accepted[j]
	var at []int      // accepted[j] is req.Messages[at[j]]
	var newSubjects map[string]error
	for i, m := range req.Messages {
		err := acc.send(m.Subject)
		if err == nil {
			err = n.recordNewSubject(ctx, acc.app(), &newSubjects, m.Subject)
		}
		if err != nil {
			resp.Results[i] = transport.SendResult{Status: transport.SendRejected, Error: transport.RejectionText(err)}
			continue
		}
		if m.DeliverAt > limit {
			resp.Results[i] = transport.SendResult{Status: transport.SendRejected, Error: fmt.Sprintf(
				"delivery time %s is more than the broker's maximum delay (%s) ahead",
				time.UnixMilli(m.DeliverAt).UTC().Format(time.RFC3339), n.cfg.MaxDelay)}
			continue
		}
		accepted, wire = append(accepted, m), append(wire, req.Wire[i])
		at = append(at, i)
	}
	if len(accepted) > 0 {
		ctx, cancel := n.requestContext(ctx)
		defer cancel()
		results, err := n.batcher.send(ctx, accepted, wire, size, senderOf(ctx, acc))
		if r, ok := err.(*refusedSend); ok {
			refused, err := n.refuseSend(ctx, accepted, r.refusal)
			if err != nil {
				return nil, err
			}
			for j, r := range refused {
				resp.Results[at[j]] = r
			}
			return resp.Encode(), nil
		}
		if err != nil {
			return nil, err
		}
		for j, r := range results {
			resp.Results[at[j]] = sendResult(r)
		}
		n.metrics.messagesIn.Add(float64(len(results)))
	}
	return resp.Encode(), nil
}

// sendResult is the wire form of one message's outcome.
func sendResult(r fsm.MessageResult) transport.SendResult {
	switch r.Status {
	case fsm.Appended:
		return transport.SendResult{Status: transport.SendAppended}
	case fsm.Duplicate:
		return transport.SendResult{Status: transport.SendDuplicate}
	case fsm.Scheduled:
		return transport.SendResult{Status: transport.SendScheduled}
	}
	return transport.SendResult{Status: transport.SendRejected, Error: errString(r.Err)}
}

func errString(err error) string {
	if err == nil {
		return "rejected"
	}
	return err.Error()
}

// senderOf is who sends a request's messages, for their timelines: the
// application (with its limit of delayed messages), if any, and the
// client's address; nil for a call from inside the node.
func senderOf(ctx context.Context, acc *access) *fsm.Sender {
	s := acc.sender()
	if peer := transport.PeerOf(ctx); peer != nil {
		if s == nil {
			s = &fsm.Sender{}
		}
		s.Addr = peer.Addr
	}
	return s
}

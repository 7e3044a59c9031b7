package server

import (
	"context"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/transport"
)

// handleNack proposes a consumer's failure to process messages: they come
// back to its group later, or become dead letters.
func (n *Node) handleNack(ctx context.Context, p []byte) ([]byte, error) {
	req, err := transport.DecodeNackRequest(p)
	if err != nil {
		return nil, err
	}
	if _, err := n.consumerRequest(ctx, transport.TypeNack, req.Subject, req.Group, req.Consumer); err != nil {
		return nil, err
	}
	cmd := &fsm.Nack{Now: n.clock.now().UnixMilli(), Subject: req.Subject, Group: req.Group, Consumer: req.Consumer,
		Epoch: req.Epoch, Ranges: fsmRanges(req.Ranges)}
	if !req.RetryAt.IsZero() {
		cmd.RetryAt = max(req.RetryAt.UnixMilli(), 1) // a time before now retries at once
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	resp, err := n.propose(ctx, cmd.Encode())
	if err != nil {
		return nil, err
	}
	r := resp.(*fsm.NackResult)
	if r.Due > 0 {
		n.notify.kick(req.Subject) // waiting pulls take them; later ones are kicked when their retry fires
	}
	n.metrics.nacked.Add(float64(r.Retried + r.Dead))
	return (&transport.AckResponse{}).Encode(), nil
}

// handleExtend proposes more time for messages a consumer is still
// processing.
func (n *Node) handleExtend(ctx context.Context, p []byte) ([]byte, error) {
	req, err := transport.DecodeExtendRequest(p)
	if err != nil {
		return nil, err
	}
	if _, err := n.consumerRequest(ctx, transport.TypeExtend, req.Subject, req.Group, req.Consumer); err != nil {
		return nil, err
	}
	cmd := &fsm.Extend{Now: n.clock.now().UnixMilli(), Subject: req.Subject, Group: req.Group, Consumer: req.Consumer,
		Epoch: req.Epoch, Ranges: fsmRanges(req.Ranges)}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	_, err = n.propose(ctx, cmd.Encode())
	return nil, err
}

// fsmRanges converts ranges of a request, merged: each sequence once,
// however the client sent them.
func fsmRanges(in []transport.AckRange) []fsm.AckRange {
	out := make([]fsm.AckRange, 0, len(in))
	for _, r := range in {
		out = append(out, fsm.AckRange{First: r.First, Last: r.Last})
	}
	return fsm.MergeRanges(out)
}

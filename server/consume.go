package server

import (
	"context"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/transport"
)

// handleAck proposes that a consumer processed messages: they leave its
// unacked entries, and its ack position moves over the contiguous ones.
func (n *Node) handleAck(ctx context.Context, p []byte) ([]byte, error) {
	req, err := transport.DecodeAckRequest(p)
	if err != nil {
		return nil, err
	}
	if _, err := n.consumerRequest(ctx, transport.TypeAck, req.Subject, req.ConsumerGroup, req.Consumer); err != nil {
		return nil, err
	}
	cmd := &fsm.Ack{Now: n.clock.now().UnixMilli(), Subject: req.Subject, ConsumerGroup: req.ConsumerGroup, Consumer: req.Consumer,
		Epoch: req.Epoch, Ranges: fsm.MergeRanges(req.Ranges)}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	resp, err := n.propose(ctx, cmd.Encode())
	if err != nil {
		return nil, err
	}
	return (&transport.AckResponse{AckPos: resp.(*fsm.AckResult).AckPos}).Encode(), nil
}

// handleNack proposes a consumer's failure to process messages: they come
// back to its group later, or become dead letters.
func (n *Node) handleNack(ctx context.Context, p []byte) ([]byte, error) {
	req, err := transport.DecodeNackRequest(p)
	if err != nil {
		return nil, err
	}
	if _, err := n.consumerRequest(ctx, transport.TypeNack, req.Subject, req.ConsumerGroup, req.Consumer); err != nil {
		return nil, err
	}
	cmd := &fsm.Nack{Now: n.clock.now().UnixMilli(), Subject: req.Subject, ConsumerGroup: req.ConsumerGroup, Consumer: req.Consumer,
		Epoch: req.Epoch, Ranges: fsm.MergeRanges(req.Ranges)}
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
	if _, err := n.consumerRequest(ctx, transport.TypeExtend, req.Subject, req.ConsumerGroup, req.Consumer); err != nil {
		return nil, err
	}
	cmd := &fsm.Extend{Now: n.clock.now().UnixMilli(), Subject: req.Subject, ConsumerGroup: req.ConsumerGroup, Consumer: req.Consumer,
		Epoch: req.Epoch, Ranges: fsm.MergeRanges(req.Ranges)}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	_, err = n.propose(ctx, cmd.Encode())
	return nil, err
}

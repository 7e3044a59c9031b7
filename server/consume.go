package server

import (
	"context"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
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

func (n *Node) handleHeartbeat(ctx context.Context, p []byte) ([]byte, error) {
	req, err := transport.DecodeHeartbeatRequest(p)
	if err != nil {
		return nil, err
	}
	_, err = n.consumerRequest(ctx, transport.TypeHeartbeat, req.Subject, req.ConsumerGroup, req.Consumer)
	return nil, err
}

// consumerRequest checks the names of a consumer's request of type t,
// that its application may consume the subject as the group, that this
// node leads (with its clock anchored), and touches the consumer's
// session: every pull, ack and heartbeat is a sign of life.
func (n *Node) consumerRequest(ctx context.Context, t transport.Type, subject, group, consumer string) (fsm.ConsumerID, error) {
	id := fsm.ConsumerID{Subject: subject, ConsumerGroup: group, Consumer: consumer}
	if err := id.Check(); err != nil {
		return id, transport.Errorf(transport.Invalid, "%v", err)
	}
	if err := accessOf(ctx).consume(t, subject, group); err != nil {
		return id, err
	}
	if !n.isLeader() {
		return id, n.notLeader()
	}
	if err := n.clockReady(n.ctx); err != nil {
		return id, err
	}
	n.sessions.touch(id)
	return id, nil
}

// ackGone acknowledges, on the consumer's behalf, entries whose messages
// retention removed before they could be delivered: nobody can process
// them, and left unacked they would hold the consumer's ack position back.
func (n *Node) ackGone(subject string, id fsm.ConsumerID, epoch uint64, seqs []int64) {
	for _, cmd := range goneAcks(n.clock.now().UnixMilli(), id, epoch, seqs) {
		ctx, cancel := n.requestContext(n.ctx)
		_, err := n.propose(ctx, cmd.Encode())
		cancel()
		if err != nil {
			n.log.Warn("acknowledging messages removed by retention", "subject", subject, "consumer", id.Consumer, "error", err)
			return
		}
	}
}

// goneAcks are the Acks of pull sequences seqs of consumer id: their
// ranges merged, at most limits.MaxAckRanges an Ack.
func goneAcks(now int64, id fsm.ConsumerID, epoch uint64, seqs []int64) []*fsm.Ack {
	ranges := make([]message.AckRange, 0, len(seqs))
	for _, s := range seqs {
		ranges = append(ranges, message.AckRange{First: s, Last: s})
	}
	ranges = fsm.MergeRanges(ranges)
	var out []*fsm.Ack
	for len(ranges) > 0 {
		part := ranges[:min(len(ranges), limits.MaxAckRanges)]
		ranges = ranges[len(part):]
		out = append(out, &fsm.Ack{Now: now, Subject: id.Subject, ConsumerGroup: id.ConsumerGroup, Consumer: id.Consumer, Epoch: epoch, Ranges: part})
	}
	return out
}

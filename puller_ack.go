package qmq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// Ack acknowledges messages this Puller pulled, in any order. Messages
// whose acknowledgement came after the consumer's session expired are not
// acknowledged: the error wraps ErrStaleAck, and they come again. The ack
// of a message already nacked, or pulled at most once, changes nothing.
func (p *Puller) Ack(ctx context.Context, msgs ...*Message) error {
	return sdkError(p.settleAll(ctx, "ack", settlement{}, msgs))
}

// Nack says this Puller failed to process messages it pulled: each comes
// back to the consumer group (maybe to another of its consumers) when
// retry says, or with a nil retry after the group's backoff for how many
// times it was delivered; a message delivered the group's most times
// becomes a dead letter instead. Like Ack, a nack after the consumer's
// session expired is refused with an error wrapping ErrStaleAck (the
// messages come again anyway). Messages pulled at most once are left out.
func (p *Puller) Nack(ctx context.Context, retry *RetryError, msgs ...*Message) error {
	return sdkError(p.settleAll(ctx, "nack", nackSettlement(retry, time.Now()), msgs))
}

// settleAll sends one settlement for msgs, grouped by where they came from.
func (p *Puller) settleAll(ctx context.Context, what string, o settlement, msgs []*Message) error {
	byPull := map[settlement][]int64{}
	for _, m := range msgs {
		if m.puller != p {
			return fmt.Errorf("qmq: %s %s: not a message this Puller pulled", what, m.id)
		}
		if m.atMostOnce {
			continue
		}
		o.ackKey = ackKey{m.brokerGroup, m.epoch}
		byPull[o] = append(byPull[o], m.pullSeq)
	}
	var errs []error
	for o, seqs := range byPull {
		errs = append(errs, p.settle(ctx, o, seqs))
	}
	return errors.Join(errs...)
}

// ackKey says where acks go: the broker group, and the consumer's
// registration there that pulled the messages.
type ackKey struct {
	group string
	epoch uint64
}

// settlement is what becomes of messages of one registration: acked, or
// nacked to come back at retryAt (Unix milliseconds; 0 for the group's
// backoff).
type settlement struct {
	ackKey
	nack    bool
	retryAt int64
}

// nackSettlement is the settlement of a nack at now with retry (nil: the
// group's backoff).
func nackSettlement(retry *RetryError, now time.Time) settlement {
	o := settlement{nack: true}
	if at := retry.retryAt(now); !at.IsZero() {
		o.retryAt = at.UnixMilli()
	}
	return o
}

// settle sends an settlement for pull sequences of one registration, in
// requests of at most limits.MaxAckRanges ranges. A refusal because the
// registration ended wraps ErrStaleAck.
func (p *Puller) settle(ctx context.Context, o settlement, seqs []int64) error {
	c := p.r.group(o.group)
	if len(seqs) == 0 || c == nil {
		return nil
	}
	ranges := toRanges(seqs)
	for len(ranges) > 0 {
		n := min(len(ranges), limits.MaxAckRanges)
		t, payload := transport.TypeNack, []byte(nil)
		if o.nack {
			req := &transport.NackRequest{Subject: p.subject, ConsumerGroup: p.group, Consumer: p.consumer, Epoch: o.epoch, Ranges: ranges[:n]}
			if o.retryAt != 0 {
				req.RetryAt = time.UnixMilli(o.retryAt)
			}
			payload = req.Encode()
		} else {
			t, payload = transport.TypeAck, (&transport.AckRequest{Subject: p.subject, ConsumerGroup: p.group, Consumer: p.consumer,
				Epoch: o.epoch, Ranges: ranges[:n]}).Encode()
		}
		if err := p.call(ctx, o.ackKey, t, payload); err != nil {
			return err
		}
		ranges = ranges[n:]
	}
	return nil
}

// extend asks for more time for a message still being processed: its
// group's whole ack wait again, from now.
func (p *Puller) extend(ctx context.Context, m *Message) error {
	req := &transport.ExtendRequest{Subject: p.subject, ConsumerGroup: p.group, Consumer: p.consumer, Epoch: m.epoch,
		Ranges: []message.AckRange{{First: m.pullSeq, Last: m.pullSeq}}}
	return p.call(ctx, ackKey{m.brokerGroup, m.epoch}, transport.TypeExtend, req.Encode())
}

// call sends a request about messages of one registration to its broker
// group. A refusal because the registration ended wraps ErrStaleAck.
func (p *Puller) call(ctx context.Context, k ackKey, t transport.Type, payload []byte) error {
	c := p.r.group(k.group)
	if c == nil {
		return nil
	}
	if _, err := c.Call(ctx, t, payload); err != nil {
		if transport.CodeOf(err) == transport.StaleConsumer {
			return fmt.Errorf("%w (group %s): %w", ErrStaleAck, k.group, err)
		}
		return err
	}
	return nil
}

// toRanges turns pull sequences into sorted inclusive ranges.
func toRanges(seqs []int64) []message.AckRange {
	sorted := append([]int64(nil), seqs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var out []message.AckRange
	for _, s := range sorted {
		if n := len(out); n > 0 && s <= out[n-1].Last+1 {
			out[n-1].Last = max(out[n-1].Last, s)
			continue
		}
		out = append(out, message.AckRange{First: s, Last: s})
	}
	return out
}

// Handle runs h on m, a message this Puller pulled, as a Subscription runs
// its handler: in the span of handling m, when tracing is on (kind
// CONSUMER, a child of the span that sent m: see WithTracerProvider), with
// ctx carrying it so that h's own spans nest under it. It returns what h
// returns, and neither acks nor nacks m: the caller does, by the result.
func (p *Puller) Handle(ctx context.Context, m *Message, h Handler) error {
	ctx, span := p.opts.tracing.startProcess(ctx, p.group, m)
	err := h(ctx, m)
	endProcess(span, err)
	return err
}

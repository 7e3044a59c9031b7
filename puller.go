package qmq

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/transport"
)

// Puller is the plain pull API: the caller pulls messages of one subject
// as one consumer of a group, and acknowledges them explicitly. Messages
// pulled and not acknowledged go back to the group when the consumer's
// session expires (it pulls, acks and heartbeats to keep it).
type Puller struct {
	c                        *client
	subject, group, consumer string

	mu   sync.Mutex
	next int64 // one past the highest pull sequence received
}

// NewPuller returns a Puller for subject as a consumer of group at servers.
// The consumer's name is unique to this Puller unless WithConsumerName is
// given (a restarted process that reuses its name takes over what its
// earlier life left unacked).
func NewPuller(servers, subject, group string, opts ...ConsumerOption) (*Puller, error) {
	o := defaultConsumerOptions()
	for _, opt := range opts {
		opt(&o)
	}
	id := fsm.ConsumerID{Subject: subject, Group: group, Consumer: o.name}
	if err := id.Check(); err != nil {
		return nil, fmt.Errorf("qmq: %w", err)
	}
	c, err := newClient(servers)
	if err != nil {
		return nil, err
	}
	return &Puller{c: c, subject: subject, group: group, consumer: o.name}, nil
}

// Consumer returns the consumer name this Puller pulls as.
func (p *Puller) Consumer() string { return p.consumer }

// Pull returns up to limit messages, waiting up to wait (a long poll) for at
// least one; an empty result means none arrived in time. A message pulled
// and not acknowledged comes again only after the consumer's session
// expires, or to a new Puller with the same consumer name. Call Pull from
// one goroutine at a time.
func (p *Puller) Pull(ctx context.Context, limit int, wait time.Duration) ([]*Message, error) {
	p.mu.Lock()
	from := p.next
	p.mu.Unlock()
	// Asking from the next sequence we expect makes the broker hand again
	// anything it handed out in a reply we never received.
	req := &transport.PullRequest{Subject: p.subject, Group: p.group, Consumer: p.consumer, Max: limit, Wait: wait, From: from}
	// The broker answers within wait; allow for the round trip and a retry.
	cctx, cancel := context.WithTimeout(ctx, wait+30*time.Second)
	defer cancel()
	body, err := p.c.call(cctx, transport.TypePull, req.Encode())
	if err != nil {
		return nil, err
	}
	resp, err := transport.DecodePullResponse(body)
	if err != nil {
		return nil, err
	}
	out := make([]*Message, len(resp.Messages))
	p.mu.Lock()
	for _, m := range resp.Messages {
		if m.PullSeq < from {
			// Below what we asked from: the broker reclaimed this consumer (its
			// session expired) and registered it afresh, numbering from 0 again.
			p.next = 0
		}
	}
	for i, m := range resp.Messages {
		out[i] = fromLog(m.Message, m.PullSeq)
		p.next = max(p.next, m.PullSeq+1)
	}
	p.mu.Unlock()
	return out, nil
}

// Ack acknowledges messages this Puller pulled, in any order.
func (p *Puller) Ack(ctx context.Context, msgs ...*Message) error {
	seqs := make([]int64, len(msgs))
	for i, m := range msgs {
		seqs[i] = m.pullSeq
	}
	return p.ackSeqs(ctx, seqs)
}

func (p *Puller) ackSeqs(ctx context.Context, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	req := &transport.AckRequest{Subject: p.subject, Group: p.group, Consumer: p.consumer, Ranges: toRanges(seqs)}
	_, err := p.c.call(ctx, transport.TypeAck, req.Encode())
	return err
}

// Heartbeat keeps the consumer's session alive without pulling.
func (p *Puller) Heartbeat(ctx context.Context) error {
	req := &transport.HeartbeatRequest{Subject: p.subject, Group: p.group, Consumer: p.consumer}
	_, err := p.c.call(ctx, transport.TypeHeartbeat, req.Encode())
	return err
}

// Close closes the Puller's connections.
func (p *Puller) Close() error {
	p.c.close()
	return nil
}

// toRanges turns pull sequences into sorted inclusive ranges.
func toRanges(seqs []int64) []transport.AckRange {
	sorted := append([]int64(nil), seqs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var out []transport.AckRange
	for _, s := range sorted {
		if n := len(out); n > 0 && s <= out[n-1].Last+1 {
			out[n-1].Last = max(out[n-1].Last, s)
			continue
		}
		out = append(out, transport.AckRange{First: s, Last: s})
	}
	return out
}

func defaultConsumerName() string {
	host, err := os.Hostname()
	if err != nil || fsm.CheckName("consumer", host) != nil {
		host = "host"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(4))
}

package qmq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/transport"
)

// Puller is the plain pull API: the caller pulls messages of one subject
// as one consumer of a group, and acknowledges them explicitly. It pulls
// from every broker group the subject lives in. Messages pulled and not
// acknowledged go back to the group when the consumer's session expires
// (it pulls, acks and heartbeats to keep it).
type Puller struct {
	r                        *router
	subject, group, consumer string

	mu     sync.Mutex
	groups map[string]*groupPuller // by broker group
	buf    []*Message              // pulled, not yet returned
}

// groupPuller is the Puller's state in one broker group.
type groupPuller struct {
	name string
	next int64 // one past the highest pull sequence received; under Puller.mu
}

// NewPuller returns a Puller for subject as a consumer of group, for the
// cluster at servers (metaserver or broker addresses; see NewProducer).
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
	r, err := newRouter(servers)
	if err != nil {
		return nil, err
	}
	return &Puller{r: r, subject: subject, group: group, consumer: o.name, groups: map[string]*groupPuller{}}, nil
}

// Consumer returns the consumer name this Puller pulls as.
func (p *Puller) Consumer() string { return p.consumer }

// brokerGroups returns the subject's broker groups, refreshing the route
// when it is stale.
func (p *Puller) brokerGroups(ctx context.Context) ([]*groupPuller, error) {
	rt, err := p.r.lookup(ctx, p.subject, p.group)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*groupPuller, 0, len(rt.Groups))
	for _, g := range rt.Groups {
		gp := p.groups[g.Name]
		if gp == nil {
			gp = &groupPuller{name: g.Name}
			p.groups[g.Name] = gp
		}
		out = append(out, gp)
	}
	return out, nil
}

// Pull returns up to limit messages, waiting up to wait (a long poll) for at
// least one; an empty result means none arrived in time. It pulls from all
// of the subject's broker groups at once and returns as soon as one has
// messages; what the others return in the meantime is kept for the next
// call. A message pulled and not acknowledged comes again only after the
// consumer's session expires, or to a new Puller with the same consumer
// name. Call Pull from one goroutine at a time.
func (p *Puller) Pull(ctx context.Context, limit int, wait time.Duration) ([]*Message, error) {
	if out := p.take(limit); len(out) > 0 {
		return out, nil
	}
	groups, err := p.brokerGroups(ctx)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
		success bool
	)
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs, err := p.pullGroup(pctx, g, limit, wait)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if pctx.Err() == nil {
					errs = append(errs, err)
				}
				return
			}
			success = true
			if len(msgs) > 0 {
				cancel() // the others stop waiting; what they took comes again on their next pull
			}
		}()
	}
	wg.Wait()
	if out := p.take(limit); len(out) > 0 || success {
		return out, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, errors.Join(errs...)
}

// take removes up to limit messages from the buffer.
func (p *Puller) take(limit int) []*Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(limit, len(p.buf))
	out := p.buf[:n:n]
	p.buf = p.buf[n:]
	return out
}

// pullGroup pulls from one broker group into the buffer.
func (p *Puller) pullGroup(ctx context.Context, g *groupPuller, limit int, wait time.Duration) ([]*Message, error) {
	p.mu.Lock()
	from := g.next
	p.mu.Unlock()
	// Asking from the next sequence we expect makes the broker hand again
	// anything it handed out in a reply we never received.
	req := &transport.PullRequest{Subject: p.subject, Group: p.group, Consumer: p.consumer, Max: limit, Wait: wait, From: from}
	// The broker answers within wait; allow for the round trip and a retry.
	cctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
	defer cancel()
	body, err := p.r.group(g.name).Call(cctx, transport.TypePull, req.Encode())
	if err != nil {
		p.r.refresh(ctx, p.subject, p.group) // the group may have moved
		return nil, err
	}
	resp, err := transport.DecodePullResponse(body)
	if err != nil {
		return nil, err
	}
	out := make([]*Message, len(resp.Messages))
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range resp.Messages {
		if m.PullSeq < from {
			// Below what we asked from: the broker reclaimed this consumer (its
			// session expired) and registered it afresh, numbering from 0 again.
			g.next = 0
		}
	}
	for i, m := range resp.Messages {
		out[i] = fromLog(m.Message, m.PullSeq, g.name)
		g.next = max(g.next, m.PullSeq+1)
	}
	p.buf = append(p.buf, out...)
	return out, nil
}

// Ack acknowledges messages this Puller pulled, in any order.
func (p *Puller) Ack(ctx context.Context, msgs ...*Message) error {
	byGroup := map[string][]int64{}
	for _, m := range msgs {
		byGroup[m.brokerGroup] = append(byGroup[m.brokerGroup], m.pullSeq)
	}
	var errs []error
	for g, seqs := range byGroup {
		errs = append(errs, p.ackSeqs(ctx, g, seqs))
	}
	return errors.Join(errs...)
}

func (p *Puller) ackSeqs(ctx context.Context, group string, seqs []int64) error {
	c := p.r.group(group)
	if len(seqs) == 0 || c == nil {
		return nil
	}
	req := &transport.AckRequest{Subject: p.subject, Group: p.group, Consumer: p.consumer, Ranges: toRanges(seqs)}
	_, err := c.Call(ctx, transport.TypeAck, req.Encode())
	return err
}

// Heartbeat keeps the consumer's session alive, in every broker group of
// the subject, without pulling.
func (p *Puller) Heartbeat(ctx context.Context) error {
	groups, err := p.brokerGroups(ctx)
	if err != nil {
		return err
	}
	req := (&transport.HeartbeatRequest{Subject: p.subject, Group: p.group, Consumer: p.consumer}).Encode()
	var errs []error
	for _, g := range groups {
		_, err := p.r.group(g.name).Call(ctx, transport.TypeHeartbeat, req)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Close closes the Puller's connections.
func (p *Puller) Close() error {
	p.r.close()
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

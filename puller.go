package qmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/transport"
)

// Puller is the plain pull API: the caller pulls messages of one subject
// as one consumer of a group, and acknowledges (Ack) or nacks (Nack) them
// explicitly. It pulls from every broker group the subject lives in.
// Messages pulled and not acknowledged go back to the group when the
// consumer's session expires (it pulls, acks and heartbeats to keep it),
// or when the group's ack wait (30 s by default) passes without an Ack or
// a Message.InProgress.
type Puller struct {
	r                        *router
	subject, group, consumer string
	log                      *slog.Logger
	opts                     consumerOptions // how it pulls: start position, tags, at most once, broadcast
	ctx                      context.Context // background pulls; Close cancels it
	cancel                   context.CancelFunc

	mu       sync.Mutex
	groups   map[string]*groupPuller // by broker group
	buf      []*Message              // pulled, not yet returned
	inflight int                     // pulls under way
	changed  chan struct{}           // closed (and replaced) when a pull ends
}

// groupPuller is the Puller's state in one broker group. Guarded by
// Puller.mu.
type groupPuller struct {
	name  string
	next  int64  // one past the highest pull sequence received
	epoch uint64 // the consumer's registration there (0 until the first reply names it)
	busy  bool   // a pull is under way: at most one per group
	err   error  // how the last pull failed; nil if it succeeded
}

// NewPuller returns a Puller for subject as a consumer of group, for the
// cluster at servers (metaserver or broker addresses; see NewProducer).
// The consumer's name is unique to this Puller unless WithConsumerName is
// given (a restarted process that reuses its name takes over what its
// earlier life left unacked). WithLogger sets where it reports what Pull
// does not return (a broker group whose pulls fail while others answer).
func NewPuller(servers, subject, group string, opts ...PullerOption) (*Puller, error) {
	o := defaultPullerOptions()
	for _, opt := range opts {
		opt.applyPuller(&o)
	}
	return newPuller(servers, subject, group, o)
}

func newPuller(servers, subject, group string, o pullerOptions) (*Puller, error) {
	id := limits.ConsumerID{Subject: subject, Group: group, Consumer: o.name}
	if err := id.Check(); err != nil {
		return nil, fmt.Errorf("qmq: %w", err)
	}
	group, err := o.consumeGroup(group)
	if err != nil {
		return nil, err
	}
	if o.conn.err != nil {
		return nil, o.conn.err
	}
	r, err := newRouter(servers, o.conn.dial)
	if err != nil {
		return nil, err
	}
	p := &Puller{r: r, subject: subject, group: group, consumer: o.name, log: o.logger, opts: o.consumerOptions,
		groups: map[string]*groupPuller{}, changed: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Consumer returns the consumer name this Puller pulls as.
func (p *Puller) Consumer() string { return p.consumer }

// Group returns the consumer group this Puller pulls as: the group it was
// given, or with WithBroadcast the group of its own.
func (p *Puller) Group() string { return p.group }

// routeGroup is the consumer group a route lookup records with the
// metaserver: none for a broadcast consumer, whose group of its own is
// forgotten by the broker once idle.
func (p *Puller) routeGroup() string {
	if p.opts.broadcast {
		return ""
	}
	return p.group
}

// brokerGroups returns the subject's broker groups, refreshing the route
// when it is stale.
func (p *Puller) brokerGroups(ctx context.Context) ([]*groupPuller, error) {
	rt, err := p.r.lookup(ctx, p.subject, p.routeGroup())
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
// least one; an empty result means none arrived in time. It long-polls every
// broker group of the subject at once, at most one pull per group, and
// returns as soon as any has messages; pulls still under way go on, and
// what they bring is returned by later calls. A message pulled and not
// acknowledged comes again once the consumer's session expires or the
// group's ack wait passes, or to a new Puller with the same consumer name.
// Call Pull from one goroutine at a time.
func (p *Puller) Pull(ctx context.Context, limit int, wait time.Duration) ([]*Message, error) {
	if limit <= 0 || limit > limits.MaxPullMessages || wait < 0 || wait > limits.MaxPullWait {
		return nil, fmt.Errorf("qmq: pull of %d messages (1..%d) waiting %s (at most %s)", limit, limits.MaxPullMessages, wait, limits.MaxPullWait)
	}
	if out := p.take(limit); len(out) > 0 {
		return out, nil
	}
	groups, err := p.brokerGroups(ctx)
	if err != nil {
		return nil, err
	}
	// Pulls answer within wait; allow for the round trip before giving up
	// on a group that does not answer (its pull goes on in the background).
	timer := time.NewTimer(wait + time.Second)
	defer timer.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range groups {
		if !g.busy {
			g.busy = true
			p.inflight++
			go p.pullGroup(g, limit, wait)
		}
	}
	for {
		if out := p.takeLocked(limit); len(out) > 0 {
			return out, nil
		}
		if p.inflight == 0 {
			return nil, failures(groups)
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
			p.mu.Lock()
		case <-timer.C:
			p.mu.Lock()
			return nil, failures(groups)
		case <-ctx.Done():
			p.mu.Lock()
			return nil, ctx.Err()
		}
	}
}

// failures returns an error if the last pull from every group failed.
func failures(groups []*groupPuller) error {
	var errs []error
	for _, g := range groups {
		if g.err == nil {
			return nil
		}
		errs = append(errs, g.err)
	}
	return errors.Join(errs...)
}

func (p *Puller) take(limit int) []*Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeLocked(limit)
}

// takeLocked removes up to limit messages from the buffer.
func (p *Puller) takeLocked(limit int) []*Message {
	n := min(limit, len(p.buf))
	out := p.buf[:n:n]
	p.buf = p.buf[n:]
	return out
}

// drain waits for the pulls under way until ctx ends, then stops them, and
// returns every message pulled and not yet returned: a Subscription going
// down hands them to its workers.
func (p *Puller) drain(ctx context.Context) []*Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.inflight > 0 {
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			p.cancel() // what a stopped pull took comes again after the session expires
		}
		p.mu.Lock()
	}
	out := p.buf
	p.buf = nil
	return out
}

// pullGroup pulls from one broker group into the buffer; it runs on its own
// goroutine, bounded by the Puller's life and the long poll's length.
func (p *Puller) pullGroup(g *groupPuller, limit int, wait time.Duration) {
	p.mu.Lock()
	from, epoch := g.next, g.epoch
	p.mu.Unlock()
	resp, err := p.fetch(g.name, from, epoch, limit, wait)
	p.mu.Lock()
	defer p.mu.Unlock()
	g.busy = false
	p.inflight--
	close(p.changed)
	p.changed = make(chan struct{})
	if err != nil {
		if g.err == nil && p.ctx.Err() == nil {
			p.log.Warn("qmq: pulls from a broker group failing", "subject", p.subject, "group", p.group,
				"broker-group", g.name, "error", err)
		}
		g.err = fmt.Errorf("group %s: %w", g.name, err)
		return
	}
	if g.err != nil {
		p.log.Info("qmq: pulls from a broker group work again", "subject", p.subject, "group", p.group, "broker-group", g.name)
	}
	g.err = nil
	if resp.Epoch != 0 && resp.Epoch != g.epoch {
		// A new registration: the broker reclaimed this consumer (its
		// session expired) and registered it afresh, numbering from 0 again.
		// Acks of what the earlier one pulled are refused as stale.
		g.epoch, g.next = resp.Epoch, 0
	}
	for _, m := range resp.Messages {
		msg := fromLog(m.Message, m.PullSeq, resp.Epoch, g.name)
		msg.puller, msg.deliveries, msg.atMostOnce = p, m.Deliveries, p.opts.atMostOnce
		p.buf = append(p.buf, msg)
		g.next = max(g.next, m.PullSeq+1)
	}
}

// pullSlack is how long past its wait a pull is waited for: the broker
// answers within the wait, and the round trip, a retry and a large reply
// on a loaded host take the rest. Nothing shorter may cut a pull under way
// (a drain): what it handed out is consumed at most once.
const pullSlack = 10 * time.Second

// fetch sends one pull request to a broker group.
func (p *Puller) fetch(group string, from int64, epoch uint64, limit int, wait time.Duration) (*transport.PullResponse, error) {
	// Asking from the next sequence we expect makes the broker hand again
	// anything it handed out in a reply we never received.
	o := &p.opts
	req := &transport.PullRequest{Subject: p.subject, Group: p.group, Consumer: p.consumer, Max: limit, Wait: wait, From: from, Epoch: epoch,
		AtMostOnce: o.atMostOnce, Tags: o.tags, TagsAll: o.tagsAll, Start: o.start, StartAt: o.startAt}
	if o.broadcast {
		req.IdleExpiry = o.idleExpiry
	}
	ctx, cancel := context.WithTimeout(p.ctx, wait+pullSlack)
	defer cancel()
	body, err := p.r.group(group).Call(ctx, transport.TypePull, req.Encode())
	if err != nil {
		p.r.refresh(ctx, p.subject, p.routeGroup()) // the group may have moved
		return nil, err
	}
	return transport.DecodePullResponse(body)
}

// Heartbeat keeps the consumer's session alive, in every broker group of
// the subject at once (one group that does not answer delays no other),
// without pulling.
func (p *Puller) Heartbeat(ctx context.Context) error {
	groups, err := p.brokerGroups(ctx)
	if err != nil {
		return err
	}
	req := (&transport.HeartbeatRequest{Subject: p.subject, Group: p.group, Consumer: p.consumer}).Encode()
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.r.group(g.name).Call(ctx, transport.TypeHeartbeat, req); err != nil {
				errs[i] = fmt.Errorf("group %s: %w", g.name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close stops the pulls under way and closes the Puller's connections.
// Messages pulled and not returned come again after the consumer's
// session expires; at most once (WithAtMostOnce) they are lost, as a
// consumer's crash loses them: a Subscription's Drain waits for its pulls
// instead.
func (p *Puller) Close() error {
	p.cancel()
	if left := p.drain(p.ctx); len(left) > 0 {
		p.log.Info("qmq: closed with pulled messages not returned; they come again once the consumer's session expires",
			"subject", p.subject, "group", p.group, "messages", len(left))
	}
	p.r.close()
	return nil
}

func defaultConsumerName() string {
	host, err := os.Hostname()
	if err != nil || limits.CheckName("consumer", host) != nil {
		host = "host"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(4))
}

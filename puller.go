package qmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	turn     int                     // which groups a pull for fewer messages than groups asks first
	// What registration found (register): whether a broker group held
	// the consumer group already (or, where one did not answer, whether
	// the metaserver had recorded it), the broker groups of the route
	// then, and when it began.
	existed    bool
	initial    map[string]bool
	registered time.Time
}

// groupPuller is the Puller's state in one broker group. Guarded by
// Puller.mu.
type groupPuller struct {
	name  string
	next  int64  // one past the highest pull sequence received
	epoch uint64 // the consumer's registration there (0 until the first reply names it)
	busy  bool   // a pull is under way: at most one per group
	err   error  // how the last pull failed; nil if it succeeded
	// start is where a pull creating the consumer group there starts it
	// (startIn), startAt its time for StartAtTime.
	start   transport.StartPosition
	startAt time.Time
	joined  bool // a pull has succeeded there: the group exists
	empty   bool // the last pull there brought nothing
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
	p, err := newPuller(servers, subject, group, o)
	return p, sdkError(err)
}

func newPuller(servers, subject, group string, o pullerOptions) (*Puller, error) {
	id := limits.ConsumerID{Subject: subject, ConsumerGroup: group, Consumer: o.name}
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
	o.tracing.setup()
	r, err := newRouter(servers, o.conn.dial)
	if err != nil {
		return nil, err
	}
	p := &Puller{r: r, subject: subject, group: group, consumer: o.name, log: o.logger, opts: o.consumerOptions,
		groups: map[string]*groupPuller{}, changed: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	ctx, cancel := context.WithTimeout(p.ctx, registerTimeout)
	defer cancel()
	if err := p.register(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// registerTimeout bounds the registration NewPuller and Subscribe make
// before they return.
const registerTimeout = 10 * time.Second

// register makes the consumer known in every broker group of the subject,
// before NewPuller or Subscribe returns, so that a group starting at the
// latest message gets everything sent after the call returns: it asks
// for the route (the metaserver records the group), asks each broker
// group whether it holds the group already (a consumer group that exists
// somewhere starts at the earliest where it does not: that broker group
// joined the route since, or forgot it), then registers the consumer in
// each broker group at once (a pull that hands out nothing), which
// creates the group there at its start position. It fails when the route
// cannot be had or no broker group answers; a broker group that does not
// answer is logged, and its first pull later starts a new group where the
// call began (by this host's clock, less clockAllowance).
func (p *Puller) register(ctx context.Context) error {
	p.mu.Lock()
	p.registered = time.Now()
	p.mu.Unlock()
	rt, err := p.r.lookup(ctx, p.subject, p.routeGroup())
	if err != nil {
		return err
	}
	known := rt.ConsumerKnown
	p.mu.Lock()
	p.initial = map[string]bool{}
	for _, g := range rt.BrokerGroups {
		p.initial[g.Name] = true
	}
	p.mu.Unlock()
	groups, err := p.brokerGroups(ctx)
	if err != nil {
		return err
	}
	if p.opts.start == transport.StartLatest && !p.opts.broadcast {
		held, unanswered := p.holders(ctx, groups)
		p.mu.Lock()
		// A broker group that did not answer may hold it: the metaserver's
		// record of the name decides then (more, never less).
		p.existed = len(held) > 0 || (unanswered && known)
		for _, g := range groups {
			g.start = p.startIn(g.name)
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	for _, g := range groups {
		if !g.busy {
			g.busy = true
			p.inflight++
			go p.pullGroup(ctx, transport.TypeRegisterConsumer, g, 1, 0)
		}
	}
	p.awaitPullsLocked(ctx)
	defer p.mu.Unlock()
	var failed, declined []error
	for _, g := range groups {
		if g.joined {
			continue
		}
		if c := transport.CodeOf(g.err); c == transport.UnknownType || c == transport.PermissionDenied {
			// A broker of an earlier release (its guard counts the type an
			// admin's: the route lookup checked the application's right to
			// consume already), or one whose applications lag: the first
			// pull registers.
			declined, g.err = append(declined, g.err), nil
		} else {
			failed = append(failed, g.err)
		}
		if p.opts.start == transport.StartLatest && !p.existed {
			// Not registered: where the call began is the best it has.
			g.start, g.startAt = transport.StartAtTime, p.registered.Add(-clockAllowance)
		}
	}
	if len(failed) == len(groups) {
		return fmt.Errorf("qmq: consumer %s of group %s on %s: %w", p.consumer, p.group, p.subject, errors.Join(failed...))
	}
	if len(failed)+len(declined) > 0 {
		p.log.Warn("qmq: a broker group did not take the consumer's registration (it did not answer, is of an earlier release, "+
			"or does not know the application yet); a new group starts there by this host's clock",
			"subject", p.subject, "consumer_group", p.group, "error", errors.Join(append(failed, declined...)...))
	}
	return nil
}

// holders asks each of groups at once, for up to probeTimeout, whether it
// holds the consumer group, and returns those that said so, and whether
// one did not answer.
func (p *Puller) holders(ctx context.Context, groups []*groupPuller) (held map[string]bool, unanswered bool) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := json.Marshal(transport.ConsumerGroupsRequest{Subject: p.subject, ConsumerGroup: p.group})
	if err != nil {
		return nil, true
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	held = map[string]bool{}
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, err := p.r.group(g.name).Call(ctx, transport.TypeConsumerGroups, req)
			var infos []transport.ConsumerGroupInfo
			if err != nil || json.Unmarshal(body, &infos) != nil {
				mu.Lock()
				unanswered = true
				mu.Unlock()
				return
			}
			for _, info := range infos {
				if info.Subject == p.subject && info.ConsumerGroup == p.group {
					mu.Lock()
					held[g.name] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return held, unanswered
}

// probeTimeout bounds how long registration asks the broker groups
// whether they hold the consumer group.
const probeTimeout = 3 * time.Second

// clockAllowance is how far behind this host's clock a broker's clock may
// run: a group started by time where registration failed starts this
// much before the call began.
const clockAllowance = 2 * time.Second

// startIn is where a pull that creates the consumer group in broker group
// name starts it: the consumer's own start, but for one at the latest
// message (the default) the earliest when another broker group held the
// group as this consumer registered (one where it does not exist yet
// joined the route since, or forgot it) or when name joined the route
// after it registered (so everything it holds of the subject came after).
func (p *Puller) startIn(name string) transport.StartPosition {
	if p.opts.start != transport.StartLatest {
		return p.opts.start
	}
	if p.existed || (p.initial != nil && !p.initial[name]) {
		return transport.StartEarliest
	}
	return transport.StartLatest
}

// awaitPullsLocked waits, holding p.mu between looks, until no pull is
// under way or ctx ends.
func (p *Puller) awaitPullsLocked(ctx context.Context) {
	for p.inflight > 0 {
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			p.mu.Lock()
			return
		}
		p.mu.Lock()
	}
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
	out := make([]*groupPuller, 0, len(rt.BrokerGroups))
	for _, g := range rt.BrokerGroups {
		gp := p.groups[g.Name]
		if gp == nil {
			gp = &groupPuller{name: g.Name, start: p.startIn(g.Name), startAt: p.opts.startAt}
			p.groups[g.Name] = gp
		}
		out = append(out, gp)
	}
	return out, nil
}

// Pull returns up to limit messages, waiting up to wait (a long poll) for at
// least one; an empty result means none arrived in time. It long-polls every
// broker group of the subject at once, at most one pull per group, limit
// spread over them (so that about limit arrive in all), and returns as
// soon as any has messages; pulls still under way go on, and what they
// bring is returned by later calls. A message pulled and not
// acknowledged comes again once the consumer's session expires or the
// group's ack wait passes, or to a new Puller with the same consumer name.
// Call Pull from one goroutine at a time.
func (p *Puller) Pull(ctx context.Context, limit int, wait time.Duration) ([]*Message, error) {
	msgs, err := p.pull(ctx, limit, wait)
	return msgs, sdkError(err)
}

func (p *Puller) pull(ctx context.Context, limit int, wait time.Duration) ([]*Message, error) {
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
	deadline := time.Now().Add(wait)
	timer := time.NewTimer(wait + time.Second)
	defer timer.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		quick := p.startPullsLocked(groups, limit, max(time.Until(deadline), 0))
		for {
			if out := p.takeLocked(limit); len(out) > 0 {
				return out, nil
			}
			if p.inflight == 0 {
				if err := failures(groups); err != nil {
					return nil, err
				}
				if quick && time.Now().Before(deadline) {
					break // turns that did not wait found nothing: the next ones
				}
				return nil, nil
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
}

// startPullsLocked starts a pull of each of groups that has none under
// way, waiting up to wait, limit spread over them (so that what arrives
// stays near it: at most one more per group). For fewer messages than
// such groups it pulls from as many, taken in turn, and a turn waits for
// messages only when no other group may have some (else it would hold up
// those the others keep); it reports whether a turn did not wait. Called
// with p.mu held.
func (p *Puller) startPullsLocked(groups []*groupPuller, limit int, wait time.Duration) (quick bool) {
	var idle []*groupPuller
	for _, g := range groups {
		if !g.busy {
			idle = append(idle, g)
		}
	}
	turns := len(idle) > limit
	if turns {
		p.turn++
		start := p.turn % len(idle)
		idle = append(idle[start:], idle[:start]...)[:limit]
	}
	share := (limit + len(idle) - 1) / max(len(idle), 1)
	for _, g := range idle {
		g.busy = true
		p.inflight++
		w := wait
		if turns && !othersEmpty(groups, g) {
			w, quick = 0, true
		}
		go p.pullGroup(p.ctx, transport.TypePull, g, share, w)
	}
	return quick
}

// othersEmpty says whether every group of groups but g has a pull under
// way or found nothing last time.
func othersEmpty(groups []*groupPuller, g *groupPuller) bool {
	for _, o := range groups {
		if o != g && !o.busy && !o.empty {
			return false
		}
	}
	return true
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
	if p.awaitPullsLocked(ctx); p.inflight > 0 {
		p.cancel() // what a stopped pull took comes again after the session expires
		p.awaitPullsLocked(context.Background())
	}
	out := p.buf
	p.buf = nil
	return out
}

// pullGroup pulls from one broker group into the buffer; it runs on its own
// goroutine, bounded by ctx (the Puller's life, or a registration) and the
// long poll's length.
func (p *Puller) pullGroup(ctx context.Context, t transport.Type, g *groupPuller, limit int, wait time.Duration) {
	p.mu.Lock()
	from, epoch, start, startAt := g.next, g.epoch, g.start, g.startAt
	p.mu.Unlock()
	resp, err := p.fetch(ctx, t, g.name, from, epoch, start, startAt, limit, wait)
	p.mu.Lock()
	defer p.mu.Unlock()
	g.busy = false
	p.inflight--
	close(p.changed)
	p.changed = make(chan struct{})
	if err != nil {
		if g.err == nil && p.ctx.Err() == nil {
			p.log.Warn("qmq: pulls from a broker group failing", "subject", p.subject, "consumer_group", p.group,
				"broker_group", g.name, "error", err)
		}
		g.err, g.empty = fmt.Errorf("group %s: %w", g.name, err), true
		return
	}
	if g.err != nil && g.joined {
		p.log.Info("qmq: pulls from a broker group work again", "subject", p.subject, "consumer_group", p.group, "broker_group", g.name)
	}
	g.err, g.joined = nil, true
	if t == transport.TypePull { // a registration brings nothing by design
		g.empty = len(resp.Messages) == 0
	}
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

// fetch sends one pull request (t: a pull, or a registration) to a broker
// group, which creates the consumer group there at start (startAt) if it
// does not exist.
func (p *Puller) fetch(ctx context.Context, t transport.Type, group string, from int64, epoch uint64, start transport.StartPosition,
	startAt time.Time, limit int, wait time.Duration) (*transport.PullResponse, error) {
	// Asking from the next sequence we expect makes the broker hand again
	// anything it handed out in a reply we never received.
	o := &p.opts
	req := &transport.PullRequest{Subject: p.subject, ConsumerGroup: p.group, Consumer: p.consumer, Max: limit, Wait: wait, From: from, Epoch: epoch,
		AtMostOnce: o.atMostOnce, Tags: o.tags, TagsAll: o.tagsAll, Start: start, StartAt: startAt}
	if o.broadcast {
		req.IdleExpiry = o.idleExpiry
	}
	ctx, cancel := context.WithTimeout(ctx, wait+pullSlack)
	defer cancel()
	body, err := p.r.group(group).Call(ctx, t, req.Encode())
	if err != nil {
		// The group may have moved, or its leader changed while the call
		// waited on the old one: ask the metaserver, briefly and under a
		// deadline of its own (ctx may be what ended).
		rctx, rcancel := context.WithTimeout(p.ctx, staleRefresh)
		p.r.refresh(rctx, p.subject, p.routeGroup())
		rcancel()
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
		return sdkError(err)
	}
	req := (&transport.HeartbeatRequest{Subject: p.subject, ConsumerGroup: p.group, Consumer: p.consumer}).Encode()
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
	return sdkError(errors.Join(errs...))
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
			"subject", p.subject, "consumer_group", p.group, "messages", len(left))
	}
	p.r.close()
	return nil
}

package qmq

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/transport"
)

// SendListener hears the outcome of an asynchronous send (QMQ's
// MessageSendStateListener). Its methods run on the producer's goroutines:
// keep them short.
type SendListener interface {
	OnSuccess(m *Message)
	OnFailed(m *Message, err error)
}

// SendFunc adapts a function to a SendListener: err is nil on success.
type SendFunc func(m *Message, err error)

// OnSuccess calls f(m, nil).
func (f SendFunc) OnSuccess(m *Message) { f(m, nil) }

// OnFailed calls f(m, err).
func (f SendFunc) OnFailed(m *Message, err error) { f(m, err) }

// Producer sends messages. It is safe for concurrent use; concurrent sends
// are batched into shared requests.
type Producer struct {
	r     *router
	opts  producerOptions
	queue chan *pending
	slots chan struct{}
	stop  chan struct{}
	wg    sync.WaitGroup

	mu     sync.RWMutex // enqueue holds it shared; Close exclusively
	closed bool

	// traceSkipped counts the sends whose span's context was not carried
	// (the message was at a limit).
	traceSkipped atomic.Int64

	// beforeRequest, set by tests, runs as a request to a broker group is
	// about to be made.
	beforeRequest func(group string)
}

// pending is one message waiting for its batch.
type pending struct {
	ctx  context.Context
	msg  *Message
	wire *message.Message // msg as sent, built once at enqueue
	size int              // wire's encoded size
	done func(error)
	span *sendSpan // ends with the outcome
	// maybeAt is the broker group a request of msg went to without an
	// answer (a timeout, a lost connection): it may have stored msg. A
	// message whose id its producer chose never moves from there unless
	// the group refuses it (then it looked, and holds it nowhere).
	maybeAt atomic.Pointer[string]
	// abandoned says the caller gave up (SendMessage's context ended);
	// attempt is the request it is in, if one is under way.
	abandoned atomic.Bool
	attempt   atomic.Pointer[attempt]
}

// attempt is one request to a broker group, cancelled once every caller
// of its messages has given up (their SendMessage returned): nobody waits
// for its answer, and a retry would store a message its caller was told
// failed.
type attempt struct {
	live   atomic.Int64
	cancel context.CancelFunc
}

func (a *attempt) release() {
	if a.live.Add(-1) == 0 {
		a.cancel()
	}
}

// abandon records that q's caller gave up, and releases its request.
func (q *pending) abandon() {
	q.abandoned.Store(true)
	if a := q.attempt.Swap(nil); a != nil {
		a.release()
	}
}

// join puts each of qs into request a (cancelled by cancel), releasing at
// once those whose caller gave up already; the function it returns takes
// them out again.
func join(qs []*pending, cancel context.CancelFunc) (leave func()) {
	a := &attempt{cancel: cancel}
	a.live.Store(int64(len(qs)))
	for _, q := range qs {
		q.attempt.Store(a)
		if q.abandoned.Load() && q.attempt.CompareAndSwap(a, nil) {
			a.release()
		}
	}
	return func() {
		for _, q := range qs {
			q.attempt.CompareAndSwap(a, nil)
		}
	}
}

// NewProducer returns a Producer for the cluster at servers: a
// comma-separated HOST:PORT list of metaserver nodes or broker nodes (any
// one will do). Each subject's messages are spread over its writable broker
// groups.
func NewProducer(servers string, opts ...ProducerOption) (*Producer, error) {
	o := producerOptions{maxBatch: 1000, maxInflight: 8, sendTimeout: 30 * time.Second, maxDelay: DefaultMaxDelay, now: time.Now}
	for _, opt := range opts {
		opt.applyProducer(&o)
	}
	if o.maxBatch <= 0 || o.maxBatch > limits.MaxBatchMessages || o.maxInflight <= 0 || o.sendTimeout <= 0 || o.maxDelay <= 0 {
		return nil, fmt.Errorf("qmq: producer options: batch %d (1..%d), inflight %d, timeout %s and maximum delay %s must be positive",
			o.maxBatch, limits.MaxBatchMessages, o.maxInflight, o.sendTimeout, o.maxDelay)
	}
	if o.conn.err != nil {
		return nil, o.conn.err
	}
	o.tracing.setup()
	r, err := newRouter(servers, o.conn.dial)
	if err != nil {
		return nil, sdkError(err)
	}
	p := &Producer{r: r, opts: o, queue: make(chan *pending, 4*o.maxBatch),
		slots: make(chan struct{}, o.maxInflight), stop: make(chan struct{})}
	p.wg.Add(1)
	go p.run()
	return p, nil
}

// GenerateMessage returns a new message for subject with a fresh id
// (SetID replaces it with one of the caller's).
func (p *Producer) GenerateMessage(subject string) *Message {
	now := p.opts.now()
	return &Message{id: newMessageID(now), subject: subject, createdAt: now}
}

// Check reports whether SendMessage would refuse m before sending it, and
// why: a subject that breaks the naming rule (ErrInvalidName), a delivery
// time beyond the maximum delay (ErrDelayTooLong), a message or a field
// over its limit (ErrMessageTooLarge, or ErrInvalidMessage). A
// message that passes may still be refused by a broker with lower limits
// of its own. A transactional outbox checks a message with it before it
// keeps it to send.
func (p *Producer) Check(m *Message) error {
	if _, err := p.check(m); err != nil {
		return sdkError(fmt.Errorf("qmq: send %s: %w", m.id, err))
	}
	return nil
}

// check validates a message before it is queued, so one bad message never
// fails a batch of good ones, and returns it as it will be sent.
func (p *Producer) check(m *Message) (*message.Message, error) {
	if err := limits.CheckName("subject", m.subject); err != nil {
		return nil, err
	}
	now := p.opts.now()
	if limit := now.Add(p.opts.maxDelay); m.deliverAt.After(limit) {
		return nil, fmt.Errorf("%w: %s is %s ahead, more than %s", ErrDelayTooLong,
			m.deliverAt.UTC().Format(time.RFC3339), m.deliverAt.Sub(now).Round(time.Second), p.opts.maxDelay)
	}
	w := m.toLog(now)
	return w, w.Check()
}

// SendMessage sends m and returns once the broker group has committed and
// applied it, or found a message with its id already stored within its
// dedup window (then it stores nothing, and m.Duplicate reports true).
// Retriable failures are retried until ctx ends.
func (p *Producer) SendMessage(ctx context.Context, m *Message) error {
	done := make(chan error, 1)
	q, err := p.enqueue(ctx, m, func(err error) { done <- err })
	if err != nil {
		return sdkError(err)
	}
	select {
	case err := <-done:
		return sdkError(err)
	case <-ctx.Done():
		// The send stops: its request is cancelled once no other caller
		// waits for it, and it is not sent again (deliver). One under way
		// may have stored it already, and the error says where.
		q.abandon()
		err := sdkError(sendFailed(q, ctx.Err()))
		q.span.end(m, err)
		return err
	}
}

// SendAsync sends m in the background and reports to l (which may be nil).
func (p *Producer) SendAsync(m *Message, l SendListener) {
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.sendTimeout)
	report := func(err error) {
		cancel()
		if l == nil {
			return
		}
		if err != nil {
			l.OnFailed(m, sdkError(err))
		} else {
			l.OnSuccess(m)
		}
	}
	if _, err := p.enqueue(ctx, m, report); err != nil {
		report(err)
	}
}

// enqueue queues m to send, calling done with the outcome unless it
// returns an error. The send's span, started here, ends with the outcome
// (or the error).
func (p *Producer) enqueue(ctx context.Context, m *Message, done func(error)) (q *pending, err error) {
	sctx, span := p.startSend(ctx, m)
	defer func() {
		if err != nil {
			span.end(m, sdkError(err))
		}
	}()
	wire, err := p.check(m)
	if err != nil {
		return nil, fmt.Errorf("qmq: send %s: %w", m.id, err)
	}
	p.inject(sctx, m, wire)
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, ErrClosed
	}
	q = &pending{ctx: ctx, msg: m, wire: wire, size: wire.EncodedSize(), span: span}
	q.done = func(err error) {
		span.end(m, sdkError(err))
		done(err)
	}
	select {
	case p.queue <- q:
		return q, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("qmq: send %s: %w", m.id, ctx.Err())
	}
}

// run gathers queued messages into batches and sends up to maxInflight at
// once.
func (p *Producer) run() {
	defer p.wg.Done()
	var sends sync.WaitGroup
	defer sends.Wait()
	var carried *pending
	for {
		first := carried
		carried = nil
		if first == nil {
			select {
			case first = <-p.queue:
			case <-p.stop:
				// Close: send what is still queued, then stop.
				select {
				case first = <-p.queue:
				default:
					return
				}
			}
		}
		batch, size := []*pending{first}, first.size
	gather:
		for len(batch) < p.opts.maxBatch && size < maxRequestBytes {
			select {
			case q := <-p.queue:
				if size+q.size > maxRequestBytes {
					carried = q // too big for this request: it starts the next
					break gather
				}
				batch = append(batch, q)
				size += q.size
			default:
				break gather
			}
		}
		p.slots <- struct{}{}
		sends.Add(1)
		go func() {
			defer func() { <-p.slots; sends.Done() }()
			p.sendBatch(batch)
		}()
	}
}

// sendBatch sends one batch, retrying retriable failures with the same ids
// until the latest deadline among its messages (a message without one
// counts the send timeout). A synchronous caller whose own deadline passes
// first has already returned; the others are not cut short by it.
func (p *Producer) sendBatch(batch []*pending) {
	var deadline time.Time
	live := batch[:0:0]
	for _, q := range batch {
		if err := q.ctx.Err(); err != nil {
			q.done(fmt.Errorf("qmq: send %s: %w", q.msg.id, err))
			continue
		}
		live = append(live, q)
		dl, ok := q.ctx.Deadline()
		if !ok {
			dl = time.Now().Add(p.opts.sendTimeout)
		}
		if dl.After(deadline) {
			deadline = dl
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	p.deliver(ctx, live)
}

// recheckAfter is how long a send keeps trying one broker group before it
// asks the metaserver whether the group is still alive.
const recheckAfter = 5 * time.Second

// outcome is what became of one request to a broker group.
type outcome int

const (
	reported outcome = iota // every message's outcome was reported
	moveOn                  // the group cannot take them: try another group
	tryAgain                // the outcome is unknown: retry the same group
)

// deliver sends msgs to their subjects' broker groups, one request per
// group, until ctx ends. Messages whose outcome is unknown (a timeout, a
// leader election) are retried on the same group with the same ids, which
// it deduplicates. They move to another writable group of the subject
// when theirs refuses them (drained, or its disk full: a refusing leader
// answers as duplicates the messages it stored, and refuses only the
// others). A message with a generated id also moves when the metaserver
// marks its group unavailable, and may then be stored in both groups
// (at-least-once); one whose id its producer chose never does: it waits
// for its group, or fails saying it may be stored there.
func (p *Producer) deliver(ctx context.Context, msgs []*pending) {
	avoid := map[string]bool{}        // groups that cannot take this batch
	sticky := map[string][]*pending{} // to retry on the same group
	backoff := 10 * time.Millisecond
	for len(msgs) > 0 || len(sticky) > 0 {
		// A message whose own context ended is not sent again: its caller
		// was told it failed.
		msgs = endedOut(msgs)
		for g, qs := range sticky {
			if sticky[g] = endedOut(qs); len(sticky[g]) == 0 {
				delete(sticky, g)
			}
		}
		byGroup := sticky
		sticky = map[string][]*pending{}
		chosen := map[string]string{} // subject → group, one per subject per round
		p.r.prefetch(ctx, subjectsOf(msgs))
		for _, q := range msgs {
			// A message whose id its producer chose goes where a resend of
			// the id from another Producer would go (pickFor).
			g, ok := chosen[q.msg.subject]
			if !ok || q.msg.chosenID {
				rt, err := p.r.lookup(ctx, q.msg.subject, "")
				if err != nil {
					q.done(fmt.Errorf("qmq: send %s: %w", q.msg.id, err))
					continue
				}
				if q.msg.chosenID {
					g = rt.pickFor(q.msg.id, avoid)
				} else {
					g = rt.pick(avoid)
					chosen[q.msg.subject] = g
				}
			}
			if g == "" {
				q.done(fmt.Errorf("qmq: send %s: %w", q.msg.id, errNoWritableGroup))
				continue
			}
			byGroup[g] = append(byGroup[g], q)
		}
		var (
			mu    sync.Mutex
			wg    sync.WaitGroup
			moved []*pending
		)
		for g, qs := range byGroup {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, refused, unknown := p.sendTo(ctx, g, qs)
				// Ask again where the subjects live. After a refusal the group
				// is drained: move what it refused (the fresh routes say so to
				// the next pick). After a failure they stay on it unless the
				// metaserver no longer calls it writable and available.
				var keep, move []*pending
				switch out {
				case reported:
					if len(refused) == 0 && len(unknown) == 0 {
						return
					}
					if len(refused) > 0 {
						p.refreshRoutes(ctx, refused)
					}
					move = refused
					// A refusing group still storing an earlier send (one
					// that cannot apply for want of disk may store it much
					// later): one whose id was chosen waits for it, the
					// others move on, and may be stored twice (at least once).
					for _, q := range unknown {
						q.maybeAt.Store(&g)
						if q.msg.chosenID {
							keep = append(keep, q)
						} else {
							move = append(move, q)
						}
					}
				case moveOn:
					p.refreshRoutes(ctx, qs)
					move = qs
				default:
					for _, q := range qs {
						q.maybeAt.Store(&g)
					}
					keep, move = p.recheck(ctx, g, qs)
				}
				if out == moveOn {
					refused = qs
				}
				for _, q := range refused {
					q.refusedBy(g)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(move) > 0 {
					avoid[g] = true
					moved = append(moved, move...)
				}
				if len(keep) > 0 {
					sticky[g] = keep
				}
			}()
		}
		wg.Wait()
		msgs = moved
		if len(msgs) == 0 && len(sticky) == 0 {
			return
		}
		if !wait.Sleep(ctx, backoff) {
			for _, qs := range append(slices.Collect(maps.Values(sticky)), msgs) {
				for _, q := range qs {
					q.done(sendFailed(q, ctx.Err()))
				}
			}
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// refreshRoutes asks the metaserver again, briefly, where qs's subjects
// live; a subject it does not answer for is left out.
func (p *Producer) refreshRoutes(ctx context.Context, qs []*pending) map[string]*route {
	out := map[string]*route{}
	tried := map[string]bool{}
	for _, q := range qs {
		if tried[q.msg.subject] {
			continue
		}
		tried[q.msg.subject] = true
		rctx, cancel := context.WithTimeout(ctx, staleRefresh)
		if rt, err := p.r.refresh(rctx, q.msg.subject, ""); err == nil {
			out[q.msg.subject] = rt
		}
		cancel()
	}
	return out
}

// refusedBy hears that group refused q having looked for it: it does not
// hold q, nor will.
func (q *pending) refusedBy(group string) {
	if g := q.maybeAt.Load(); g != nil && *g == group {
		q.maybeAt.Store(nil)
	}
}

// endedOut reports the messages of qs whose own context ended as failed,
// and returns the others.
func endedOut(qs []*pending) []*pending {
	live := qs[:0:0]
	for _, q := range qs {
		if err := q.ctx.Err(); err != nil {
			q.done(sendFailed(q, err))
			continue
		}
		live = append(live, q)
	}
	return live
}

// sendFailed is the error of a message whose send ended with err: it says
// when a broker group may have stored the message all the same.
func sendFailed(q *pending, err error) error {
	if g := q.maybeAt.Load(); g != nil {
		return fmt.Errorf("qmq: send %s: %w (broker group %s may have stored it: a resend with the same id is stored once)",
			q.msg.id, err, *g)
	}
	return fmt.Errorf("qmq: send %s: %w", q.msg.id, err)
}

// recheck splits qs into the messages whose subject still has group as a
// writable, available group (keep) and the others (move). A subject the
// metaserver does not answer for presumes the group alive; a message whose
// id its producer chose is always kept (it may be stored there).
func (p *Producer) recheck(ctx context.Context, group string, qs []*pending) (keep, move []*pending) {
	routes := p.refreshRoutes(ctx, qs)
	for _, q := range qs {
		ok := true
		if rt := routes[q.msg.subject]; rt != nil && !q.msg.chosenID {
			i := slices.IndexFunc(rt.BrokerGroups, func(g transport.BrokerGroupRoute) bool { return g.Name == group })
			ok = i >= 0 && rt.BrokerGroups[i].Writable && rt.BrokerGroups[i].Available
		}
		if ok {
			keep = append(keep, q)
		} else {
			move = append(move, q)
		}
	}
	return keep, move
}

// subjectsOf yields the subject of each of qs.
func subjectsOf(qs []*pending) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, q := range qs {
			if !yield(q.msg.subject) {
				return
			}
		}
	}
}

// sendTo sends one request to a broker group, trying for up to
// recheckAfter, and reports each message's outcome unless the group
// refused them all as drained (moveOn) or their outcome is still unknown
// while ctx has time (tryAgain). refused are the messages of a reported
// request that the group refused as drained while it held others, and
// unknown those it could not tell about yet (an earlier send of them is
// still being stored there); neither is reported.
func (p *Producer) sendTo(ctx context.Context, group string, qs []*pending) (out outcome, refused, unknown []*pending) {
	if p.beforeRequest != nil {
		p.beforeRequest(group)
	}
	for _, q := range qs {
		q.maybeAt.CompareAndSwap(nil, &group) // under way: a caller giving up is told where it may be
	}
	// A caller that gave up before the mark above was told the message
	// was not sent: it must not be. (It gives up, then reads the mark; the
	// mark is set, then its giving up read.)
	live := qs[:0:0]
	for _, q := range qs {
		if q.abandoned.Load() {
			q.done(sendFailed(q, context.Canceled))
			continue
		}
		live = append(live, q)
	}
	if qs = live; len(qs) == 0 {
		return reported, nil, nil
	}
	req := &transport.SendRequest{Messages: make([]*message.Message, len(qs))}
	for i, q := range qs {
		req.Messages[i] = q.wire
	}
	actx, cancel := context.WithTimeout(ctx, recheckAfter)
	leave := join(qs, cancel) // cancelled once no caller waits
	body, err := p.r.group(group).Call(actx, transport.TypeSend, req.Encode())
	leave()
	// Read before cancel, which ends actx: an attempt that ran out of its
	// time (or that no caller waits for any more) is tried again, while a
	// broker's final answer is reported as it came.
	attemptOver := actx.Err() != nil
	cancel()
	var resp *transport.SendResponse
	if err == nil {
		resp, err = transport.DecodeSendResponse(body)
	}
	if err == nil && len(resp.Results) != len(qs) {
		err = fmt.Errorf("qmq: broker answered %d results for %d messages", len(resp.Results), len(qs))
	}
	if err != nil && ctx.Err() == nil {
		var e *transport.Error
		switch {
		case refusal(err):
			// Refused, and stored nowhere there: move to another group of
			// the subject if it has one (the same group else, after a
			// backoff: a full disk is freed, a drained group reopened).
			return moveOn, nil, nil
		case errors.As(err, &e) && e.Retriable(), attemptOver:
			return tryAgain, nil, nil
		}
	}
	for i, q := range qs {
		switch {
		case err != nil:
			if ctx.Err() == nil && notStored(err) {
				q.refusedBy(group) // a broker's final answer: not stored
			}
			q.done(sendFailed(q, sizeRefused(err)))
		case resp.Results[i].Status == transport.SendRejected:
			if e := transport.ParseRejection(resp.Results[i].Error); e != nil && refusal(e) {
				refused = append(refused, q)
				continue
			} else if e != nil && e.Code == transport.Unavailable {
				unknown = append(unknown, q)
				continue
			}
			q.refusedBy(group)
			q.done(rejection(q.msg.id, resp.Results[i].Error))
		default:
			q.msg.duplicate.Store(resp.Results[i].Status == transport.SendDuplicate)
			q.done(nil)
		}
	}
	return reported, refused, unknown
}

// notStored says whether err, the final answer to a send request, means
// the broker stored none of it: it refused the request before proposing
// it. Another (INTERNAL, an answer that does not decode) may come after
// the request was stored.
func notStored(err error) bool {
	switch transport.CodeOf(err) {
	case transport.Invalid, transport.TooLarge, transport.PermissionDenied, transport.Unauthenticated, transport.UnknownType:
		return true
	}
	return false
}

// refusal says whether err is a broker group refusing sends (drained, or
// its disk full): it looked, and stores the messages refused nowhere.
func refusal(err error) bool {
	c := transport.CodeOf(err)
	return c == transport.ReadOnly || c == transport.DiskFull
}

// Close sends what is queued, waits for every send in flight, and closes
// the connections. Idempotent.
func (p *Producer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stop)
	p.mu.Unlock()
	p.wg.Wait()
	p.r.close()
	return nil
}

// maxRequestBytes bounds the messages of one send request, well below the
// broker's frame limit; a larger single message travels alone.
const maxRequestBytes = 4 << 20

// rejection is the error of a message the broker rejected: an *Error
// (errors.Is(err, ErrPermissionDenied), say) when the broker named a code.
// A rejection without a code (a broker's state machine refused the
// message) matches the SDK's sentinel of the cause its text quotes.
func rejection(id, text string) error {
	if e := transport.ParseRejection(text); e != nil {
		return sizeRefused(fmt.Errorf("qmq: send %s: %w", id, e))
	}
	return withCauses(fmt.Errorf("qmq: send %s: rejected: %s", id, text), quoted(text)...)
}

// sizeRefused returns err, the answer to a send, matching
// ErrMessageTooLarge too when its code is TOO_LARGE: what a broker refuses
// a send for as too large is its messages (a message, a field of one, or
// the frame carrying them), whatever the text says.
func sizeRefused(err error) error {
	if transport.CodeOf(err) == transport.TooLarge {
		return withCauses(err, ErrMessageTooLarge)
	}
	return err
}

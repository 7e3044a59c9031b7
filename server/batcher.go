package server

import (
	"context"
	"sync"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/transport"
)

// batcher is the leader's group commit: sends arriving together are packed
// into one Append entry, and up to MaxInflightBatches entries await commit
// while the next batch gathers. hashicorp/raft then writes the entries it
// has queued with one fsync, so throughput comes from batching at both
// levels while every send is still answered only after commit and apply.
type batcher struct {
	n     *Node
	in    chan *sendCall
	slots chan struct{}

	mu      sync.Mutex
	pending map[*sendCall]struct{} // queued or proposed, not yet applied or failed
}

// sendCall is one client's send waiting for its batch: its messages, and
// each one's encoding as it arrived (proposed as it is, never encoded
// again).
type sendCall struct {
	msgs []*message.Message
	wire [][]byte
	size int
	from *fsm.Sender // the application sending, nil for none
	done chan sendOutcome
}

type sendOutcome struct {
	results []fsm.MessageResult
	err     error
}

func newBatcher(n *Node) *batcher {
	return &batcher{n: n, in: make(chan *sendCall, 4096), slots: make(chan struct{}, n.cfg.MaxInflightBatches), pending: map[*sendCall]struct{}{}}
}

// send queues msgs, whose encodings are wire, sent by from (nil for no
// application), and waits for their outcome. It queues nothing, and
// returns a *refusedSend, when the leader refuses sends (sendRefusal).
func (b *batcher) send(ctx context.Context, msgs []*message.Message, wire [][]byte, size int, from *fsm.Sender) ([]fsm.MessageResult, error) {
	call := &sendCall{msgs: msgs, wire: wire, size: size, from: from, done: make(chan sendOutcome, 1)}
	b.n.sendGate.RLock()
	if refusal := b.n.sendRefusal(); refusal != nil {
		b.n.sendGate.RUnlock()
		return nil, &refusedSend{refusal}
	}
	b.hold(call) // checked and recorded under the gate; the wait for the queue is not
	b.n.sendGate.RUnlock()
	select {
	case b.in <- call:
	case <-ctx.Done():
		b.let(call)
		return nil, transport.Errorf(transport.Timeout, "queueing send: %v", ctx.Err())
	case <-b.n.ctx.Done():
		b.let(call)
		return nil, transport.Errorf(transport.Unavailable, "node is shutting down")
	}
	select {
	case out := <-call.done:
		return out.results, out.err
	case <-ctx.Done():
		return nil, transport.Errorf(transport.Timeout, "waiting for commit: %v", ctx.Err())
	}
}

func (b *batcher) run() {
	var carried *sendCall // taken from the queue but too big for the last batch
	for {
		first := carried
		carried = nil
		if first == nil {
			select {
			case first = <-b.in:
			case <-b.n.ctx.Done():
				return
			}
		}
		select {
		case b.slots <- struct{}{}:
		case <-b.n.ctx.Done():
			first.done <- sendOutcome{err: transport.Errorf(transport.Unavailable, "node is shutting down")}
			return
		}
		// Take whatever else is waiting, up to the batch limits. Gathering
		// happens while earlier batches are in flight, so it never waits idle.
		calls, count, size := []*sendCall{first}, len(first.msgs), first.size
	gather:
		for count < b.n.cfg.MaxBatchMessages && size < b.n.cfg.MaxBatchBytes {
			select {
			case c := <-b.in:
				if count+len(c.msgs) > limits.MaxBatchMessages {
					carried = c
					break gather
				}
				calls = append(calls, c)
				count += len(c.msgs)
				size += c.size
			default:
				break gather
			}
		}
		b.commit(calls, count)
	}
}

// senders names in cmd who sends calls' messages (an application, the
// client's address), each once, when any call says; a batch of none
// stays as it was written before applications (version 1). Without addrs
// (a group below version 2, whose replicas of the release before it
// know no Append version 3) the clients' addresses are left out: a
// sender is its application alone, and one of no application none.
func senders(cmd *fsm.Append, calls []*sendCall, addrs bool) {
	from := func(c *sendCall) *fsm.Sender {
		if c.from == nil || addrs {
			return c.from
		}
		if c.from.App == "" {
			return nil
		}
		s := *c.from
		s.Addr = ""
		return &s
	}
	var index map[fsm.Sender]int
	for _, c := range calls {
		f := from(c)
		if f == nil {
			continue
		}
		if index == nil {
			index, cmd.Senders = map[fsm.Sender]int{}, make([]int, 0, len(cmd.Messages))
		}
		if _, ok := index[*f]; !ok {
			cmd.Apps = append(cmd.Apps, *f)
			index[*f] = len(cmd.Apps)
		}
	}
	if index == nil {
		return
	}
	for _, c := range calls {
		i := 0
		if f := from(c); f != nil {
			i = index[*f]
		}
		for range c.msgs {
			cmd.Senders = append(cmd.Senders, i)
		}
	}
}

// commit proposes one Append for calls and answers them when it applies.
func (b *batcher) commit(calls []*sendCall, count int) {
	msgs, wire := make([]*message.Message, 0, count), make([][]byte, 0, count)
	for _, c := range calls {
		msgs, wire = append(msgs, c.msgs...), append(wire, c.wire...)
	}
	cmd := &fsm.Append{Now: b.n.clock.now().UnixMilli(), Messages: msgs, Wire: wire}
	senders(cmd, calls, b.n.fsm.ActiveVersion() >= version.V2)
	future := b.n.applyAsync(cmd.Encode())
	b.n.metrics.batchSize.Observe(float64(count))
	go func() {
		defer func() { <-b.slots }()
		resp, err := b.n.result(future)
		var results []fsm.MessageResult
		if err == nil {
			results = resp.(*fsm.AppendResult).Messages
			b.n.notify.subjects(msgs)
		}
		for _, c := range calls {
			out := sendOutcome{err: err}
			if err == nil {
				out.results, results = results[:len(c.msgs)], results[len(c.msgs):]
			}
			c.done <- out
		}
		b.let(calls...) // applied, or failed (then never applied by this leader)
	}()
}

// hold records call as queued: a refusal cannot say its messages are
// stored nowhere (refuseSend). A call at a time, not a message: the send
// path pays a map insert per request, a refusal (rare) the scan.
func (b *batcher) hold(call *sendCall) {
	b.mu.Lock()
	b.pending[call] = struct{}{}
	b.mu.Unlock()
}

// let forgets calls as queued.
func (b *batcher) let(calls ...*sendCall) {
	b.mu.Lock()
	for _, c := range calls {
		delete(b.pending, c)
	}
	b.mu.Unlock()
}

// queued says, for each of msgs, whether a message with its id is queued
// or proposed and not yet applied.
func (b *batcher) queued(msgs []*message.Message) []bool {
	found := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		found[m.ID] = false
	}
	b.mu.Lock()
	for c := range b.pending {
		for _, m := range c.msgs {
			if _, ok := found[m.ID]; ok {
				found[m.ID] = true
			}
		}
	}
	b.mu.Unlock()
	out := make([]bool, len(msgs))
	for i, m := range msgs {
		out[i] = found[m.ID]
	}
	return out
}

package server

import (
	"context"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/logs"
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
}

// sendCall is one client's send waiting for its batch: its messages, and
// each one's encoding as it arrived (proposed as it is, never encoded
// again).
type sendCall struct {
	msgs []*logs.Message
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
	return &batcher{n: n, in: make(chan *sendCall, 4096), slots: make(chan struct{}, n.cfg.MaxInflightBatches)}
}

// send queues msgs, whose encodings are wire, sent by from (nil for no
// application), and waits for their outcome.
func (b *batcher) send(ctx context.Context, msgs []*logs.Message, wire [][]byte, size int, from *fsm.Sender) ([]fsm.MessageResult, error) {
	call := &sendCall{msgs: msgs, wire: wire, size: size, from: from, done: make(chan sendOutcome, 1)}
	select {
	case b.in <- call:
	case <-ctx.Done():
		return nil, transport.Errorf(transport.Timeout, "queueing send: %v", ctx.Err())
	case <-b.n.ctx.Done():
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

// senders names in cmd the applications sending calls' messages, each
// once, when any does; a batch of no application's stays as it was
// written before applications (version 1).
func senders(cmd *fsm.Append, calls []*sendCall) {
	var index map[string]int
	for _, c := range calls {
		if c.from == nil {
			continue
		}
		if index == nil {
			index, cmd.Senders = map[string]int{}, make([]int, 0, len(cmd.Messages))
		}
		if _, ok := index[c.from.App]; !ok {
			cmd.Apps = append(cmd.Apps, *c.from)
			index[c.from.App] = len(cmd.Apps)
		}
	}
	if index == nil {
		return
	}
	for _, c := range calls {
		i := 0
		if c.from != nil {
			i = index[c.from.App]
		}
		for range c.msgs {
			cmd.Senders = append(cmd.Senders, i)
		}
	}
}

// commit proposes one Append for calls and answers them when it applies.
func (b *batcher) commit(calls []*sendCall, count int) {
	msgs, wire := make([]*logs.Message, 0, count), make([][]byte, 0, count)
	for _, c := range calls {
		msgs, wire = append(msgs, c.msgs...), append(wire, c.wire...)
	}
	cmd := &fsm.Append{Now: b.n.clock.now().UnixMilli(), Messages: msgs, Wire: wire}
	senders(cmd, calls)
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
	}()
}

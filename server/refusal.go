package server

import (
	"context"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// A leader that refuses a send (its group drained, its disk under the
// floor) says which of its messages it stores nowhere, so that a producer
// moves only those to another broker group of the subject. A producer
// retries a message whose outcome it does not know (a lost reply, a
// timeout) on the same group with the same id; if the refusal came
// without looking, a message stored by the first attempt would move and
// be stored in two groups, and a chosen id would no longer be stored once.
//
// So a refusal looks, in what this leader knows completely:
//
//   - the sends it admitted: each checks for a refusal and queues under
//     sendGate's read lock, recorded by the batcher until its entry is
//     applied or has failed; the refusal takes the lock once, so every
//     send admitted before it is recorded. A message still recorded may
//     yet be stored: it is answered UNAVAILABLE, and a producer tries the
//     group again with a message whose id it chose (once applied, the
//     state holds it);
//   - the state machine, once it has applied what earlier terms committed
//     (appliedTerm), while a quorum still takes this node for leader (a
//     deposed one knows nothing of what the next stores): a message it
//     holds within the dedup window (ending by its clock once anchored to
//     its voters', as an append's would) is answered as a duplicate;
//   - and it still leads, in the term it looked in: a recorded send leaves
//     the record when it is applied or fails, and fails only once the
//     node stepped down, when a next leader may still commit it.
//
// The others are refused, and a producer moves them safely: nothing
// admitted before the refusal can store them, and nothing after it is.
// Nothing of this proposes an entry, so a leader whose disk is too full
// to apply still refuses new messages at once.

// sendRefusal says why this leader takes no sends now, or nil.
func (n *Node) sendRefusal() error {
	if !n.writable.Load() {
		return transport.Errorf(transport.ReadOnly, "broker group %s is drained: send to another group of the subject", n.cfg.BrokerGroup)
	}
	if full, free := n.disk.full(); full {
		return n.diskFullError(free)
	}
	if n.bootstrapped.Load() {
		return transport.Errorf(transport.Unavailable, "broker group %s is new and sets its version first: try again", n.cfg.BrokerGroup)
	}
	return nil
}

// refusedSend is a send the batcher did not queue: refusal came between
// the handler's check and the queue.
type refusedSend struct{ refusal error }

func (e *refusedSend) Error() string { return e.refusal.Error() }

// refuseChecked answers a send refused for refusal: messages the
// application may not send are rejected as such first, so that a refusal
// tells nobody whether the group holds a message they could not send.
func (n *Node) refuseChecked(ctx context.Context, msgs []*message.Message, refusal error) ([]byte, error) {
	acc := accessOf(ctx)
	resp := &transport.SendResponse{Results: make([]transport.SendResult, len(msgs))}
	var allowed []*message.Message
	var at []int
	for i, m := range msgs {
		if err := acc.send(m.Subject); err != nil {
			resp.Results[i] = transport.SendResult{Status: transport.SendRejected, Error: transport.RejectionText(err)}
			continue
		}
		allowed, at = append(allowed, m), append(at, i)
	}
	if len(allowed) == 0 {
		return resp.Encode(), nil
	}
	results, err := n.refuseSend(ctx, allowed, refusal)
	if err != nil {
		return nil, err
	}
	for j, r := range results {
		resp.Results[at[j]] = r
	}
	return resp.Encode(), nil
}

// refuseSend answers msgs, refused for refusal: an error (refusal itself
// when the group holds none of them; a retriable one when it cannot tell
// yet), or their results: a duplicate for each it holds, the refusal for
// the others.
func (n *Node) refuseSend(_ context.Context, msgs []*message.Message, refusal error) ([]transport.SendResult, error) {
	if transport.CodeOf(refusal) == transport.DiskFull {
		n.metrics.sendsRefused.WithLabelValues("disk_full").Inc()
	}
	term := n.raft.CurrentTerm()
	if n.appliedTerm.Load() != term {
		return nil, transport.Errorf(transport.Unavailable, "%v; this new leader has not applied what earlier ones committed yet, so it cannot tell whether it holds the messages: try again", refusal)
	}
	// The window ends by the clock an append of this term would be stamped
	// with: until it is anchored to the voters', the node's own may run
	// ahead, and ids still within their window would look past it.
	if anchored, _ := n.clock.anchoredFor(term); !anchored {
		return nil, transport.Errorf(transport.Unavailable, "%v; this new leader has not read its voters' clocks yet, so it cannot tell whether it holds the messages: try again", refusal)
	}
	n.sendGate.Lock() // every send admitted before is recorded as queued
	n.sendGate.Unlock()
	// A deposed leader that has not noticed yet knows nothing of what the
	// new one stores: it must not say a message is stored nowhere. (Asking
	// the voters proposes nothing.)
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return nil, n.raftError(err)
	}
	queued := n.batcher.queued(msgs)
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	held, err := n.fsm.Holds(ids, n.clock.now().UnixMilli())
	if err != nil {
		return nil, transport.Errorf(transport.Unavailable, "%v; looking for its messages: %v", refusal, err)
	}
	if n.cfg.afterRefusalLook != nil {
		n.cfg.afterRefusalLook()
	}
	// A send this leader proposed leaves the queue when it is applied or
	// fails, and one fails (ErrLeadershipLost) only once the node has
	// stepped down: still leading in the term it looked in, it missed no
	// send that a next leader may yet commit.
	if n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
		return nil, transport.Errorf(transport.Unavailable, "%v; leadership changed while looking for its messages: try again", refusal)
	}
	results, any := make([]transport.SendResult, len(msgs)), false
	for i, h := range held {
		switch {
		case h:
			results[i], any = transport.SendResult{Status: transport.SendDuplicate}, true
		case queued[i]:
			results[i], any = transport.SendResult{Status: transport.SendRejected, Error: transport.RejectionText(transport.Errorf(transport.Unavailable,
				"%v; an earlier send of this message is being stored: try again", refusal))}, true
		default:
			results[i] = transport.SendResult{Status: transport.SendRejected, Error: transport.RejectionText(refusal)}
		}
	}
	if !any {
		return nil, refusal
	}
	return results, nil
}

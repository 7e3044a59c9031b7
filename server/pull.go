package server

import (
	"context"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/transport"
)

func (n *Node) handlePull(ctx context.Context, p []byte) ([]byte, error) {
	req, err := transport.DecodePullRequest(p)
	if err != nil {
		return nil, err
	}
	if req.Max <= 0 {
		return nil, transport.Errorf(transport.Invalid, "pull of %d messages", req.Max)
	}
	id, cmd, created, err := n.pullFor(ctx, transport.TypePull, req)
	if err != nil {
		return nil, err
	}
	defer created() // at the latest; a first proposal settles it sooner
	until := time.Now().Add(min(req.Wait, n.cfg.MaxPullWait))
	deadline := time.NewTimer(time.Until(until))
	defer deadline.Stop()
	// A long poll is a sign of life for as long as it waits.
	alive := time.NewTicker(max(n.cfg.SessionTimeout/4, 10*time.Millisecond))
	defer alive.Stop()
	epoch, proposed := uint64(0), false
	var want int64 // the memory the message that did not fit needs
	for {
		n.sessions.touch(id)
		// Take the channel before pulling, so an append between the two is
		// not missed. A subject without messages waits for the next append
		// of any subject, so that subjects a client makes up leave no
		// channel behind, and pulls again only once the subject has
		// messages (the first pull registered the consumer and its group).
		known := n.fsm.HasSubject(req.Subject)
		changed := n.notify.waitAny()
		if known {
			changed = n.notify.wait(req.Subject)
		}
		if known || !proposed {
			// The reply's memory is taken before the pull is proposed, and
			// the pull hands out no more than that: all it hands out goes
			// into the reply. At most once it is consumed as it is handed
			// out, so none may be left out. When not even one message fits
			// it hands out nothing and says what it needs, and the pull
			// waits for that much, within its own wait, before it is
			// proposed again; past it, it answers empty. The pull's client
			// waits that long and more, so nothing is handed out to a call
			// its client has given up on.
			took := int64(0)
			if want > 0 {
				wctx, cancel := context.WithDeadline(ctx, until)
				err := transport.Reserve(wctx, want)
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						// Nothing was handed out: the client asks again.
						return (&transport.PullResponse{Epoch: epoch, Version: req.Version}).Encode(), nil
					}
					return nil, err
				}
				took = want
			} else {
				took = transport.ReserveUpTo(ctx, n.fsm.PullBytes(cmd, maxPullReply))
			}
			pctx, cancel := n.requestContext(ctx)
			cmd.Now, cmd.MaxBytes = n.clock.now().UnixMilli(), max(took, 1)
			resp, err := n.propose(pctx, cmd.Encode())
			cancel()
			created()
			if err != nil {
				return nil, err
			}
			proposed = true
			res := resp.(*fsm.PullResult)
			epoch = res.Epoch
			n.sessions.touch(id) // registered now, if it was not
			if len(res.Entries) > 0 {
				return n.pulledMessages(ctx, req, id, res, took)
			}
			transport.Release(ctx, took) // nothing is held while the pull waits
			if want = res.Need; want > 0 {
				continue // a message larger than the memory taken: wait for its memory
			}
			if res.More || !known && n.fsm.HasSubject(req.Subject) {
				continue // a tag filter has more to look at, or the first message arrived meanwhile
			}
		}
	wait:
		for {
			select {
			case <-changed:
				break wait
			case <-alive.C:
				n.sessions.touch(id)
			case <-deadline.C:
				return (&transport.PullResponse{Epoch: epoch, Version: req.Version}).Encode(), nil
			case <-ctx.Done():
				return nil, transport.Errorf(transport.Unavailable, "node is shutting down")
			}
		}
	}
}

// handleRegisterConsumer registers a consumer as handlePull does, and
// hands out nothing: a pull whose reply may carry one byte (the bound of
// pull version 4 hands out nothing that does not fit, and says what it
// needs). Its consumer group is created at the request's start position
// if it does not exist, as the application's.
func (n *Node) handleRegisterConsumer(ctx context.Context, p []byte) ([]byte, error) {
	req, err := transport.DecodePullRequest(p)
	if err != nil {
		return nil, err
	}
	req.Max = 1
	id, cmd, created, err := n.pullFor(ctx, transport.TypeRegisterConsumer, req)
	if err != nil {
		return nil, err
	}
	defer created()
	pctx, cancel := n.requestContext(ctx)
	defer cancel()
	cmd.Now, cmd.MaxBytes = n.clock.now().UnixMilli(), 1
	resp, err := n.propose(pctx, cmd.Encode())
	if err != nil {
		return nil, err
	}
	n.sessions.touch(id) // registered now
	res := resp.(*fsm.PullResult)
	if len(res.Entries) > 0 {
		// A bound of one byte hands out nothing; should a pull ever hand
		// out more, at most once it is consumed: it goes into the reply.
		return n.pulledMessages(ctx, req, id, res, 0)
	}
	return (&transport.PullResponse{Epoch: res.Epoch, Version: req.Version}).Encode(), nil
}

// pullFor checks a consumer's request of type t (a pull, a registration)
// and returns its consumer, its command (its application and limit of
// consumers set) and, once the group is recorded with the metaserver, the
// function to call when the command has applied or failed (recordNewGroup).
func (n *Node) pullFor(ctx context.Context, t transport.Type, req *transport.PullRequest) (fsm.ConsumerID, *fsm.Pull, func(), error) {
	id, err := n.consumerRequest(ctx, t, req.Subject, req.ConsumerGroup, req.Consumer)
	if err != nil {
		return id, nil, nil, err
	}
	cmd := pullCommand(req)
	cmd.App, cmd.MaxConsumers = accessOf(ctx).consumerQuota()
	if err := fsm.CheckPull(cmd); err != nil {
		return id, nil, nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	created, err := n.recordNewGroup(ctx, req.Subject, req.ConsumerGroup)
	if err != nil {
		return id, nil, nil, err
	}
	return id, cmd, created, nil
}

// pullCommand is the state machine's command for a pull request; Now is
// stamped at each proposal.
func pullCommand(req *transport.PullRequest) *fsm.Pull {
	cmd := &fsm.Pull{Subject: req.Subject, ConsumerGroup: req.ConsumerGroup, Consumer: req.Consumer, Max: req.Max,
		Resend: true, From: req.From, Epoch: req.Epoch, AtMostOnce: req.AtMostOnce, Tags: req.Tags, TagsAll: req.TagsAll,
		Start: fsm.StartPosition(req.Start), IdleExpiry: req.IdleExpiry.Milliseconds()}
	if req.Start == transport.StartAtTime {
		cmd.StartAt = req.StartAt.UnixMilli()
	}
	return cmd
}

// maxPullReply bounds the messages of a pull's reply (their record
// sizes), well below the client's frame limit: the leader takes at most
// that much of the memory budget for a pull, and the pull hands out no
// more (one message larger than that waits for its own memory).
const maxPullReply = transport.DefaultMaxFrame / 2

// pulledMessages writes the reply of a pull: every message it handed out,
// which took of the client listener's memory budget before it was
// proposed (the pull hands out no more, so it never needs more but for a
// message larger than the whole budget: then it waits for all of it,
// having given back what it took); what it does not need it gives back. Messages go into the reply in their
// stored encoding, read a run of neighbours at a time, never decoded and
// encoded again. Those retention removed since the pull are acknowledged
// on the consumer's behalf.
func (n *Node) pulledMessages(ctx context.Context, req *transport.PullRequest, consumer fsm.ConsumerID, res *fsm.PullResult, took int64) ([]byte, error) {
	subject := req.Subject
	ats, err := n.locate(subject, res)
	if err != nil {
		return nil, err
	}
	var need int64
	for _, at := range ats {
		if at.Offset != fsm.Gone {
			need += int64(at.Size)
		}
	}
	if need > took {
		transport.Release(ctx, took)
		if err := transport.Reserve(ctx, need); err != nil {
			return nil, err
		}
	} else {
		transport.Release(ctx, took-need)
	}
	wires, err := n.fsm.ReadWires(ats)
	if err != nil {
		return nil, transport.Errorf(transport.Internal, "reading %s sequences %d…: %v", subject, res.Entries[0].ConsumeSeq, err)
	}
	resp := &transport.PullResponse{Epoch: res.Epoch, Version: req.Version, Messages: make([]transport.PulledMessage, 0, len(wires))}
	var gone []int64
	for i, w := range wires {
		e := res.Entries[i]
		if w == nil {
			gone = append(gone, e.PullSeq) // removed by retention after it was handed out
			continue
		}
		resp.Messages = append(resp.Messages, transport.PulledMessage{PullSeq: e.PullSeq, Deliveries: e.Deliveries, Wire: w})
	}
	if len(gone) > 0 {
		n.ackGone(subject, consumer, res.Epoch, gone)
	}
	n.metrics.messagesOut.Add(float64(len(resp.Messages)))
	return resp.Encode(), nil
}

// locate returns where the messages a pull handed out lie: as the pull
// found them, or read again if it did not read them (a pull without a
// byte bound).
func (n *Node) locate(subject string, res *fsm.PullResult) ([]fsm.MessageAt, error) {
	ats := make([]fsm.MessageAt, len(res.Entries))
	if res.Located {
		for i, e := range res.Entries {
			ats[i] = e.At
		}
		return ats, nil
	}
	seqs := make([]int64, len(res.Entries))
	for i, e := range res.Entries {
		seqs[i] = e.ConsumeSeq
	}
	ats, err := n.fsm.LocateAll(subject, seqs)
	if err != nil {
		return nil, transport.Errorf(transport.Internal, "locating %s sequences %d…: %v", subject, seqs[0], err)
	}
	return ats, nil
}

package server

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/transport"
)

// Consumer groups for operators: list and show them, change their
// settings, move them, and see, resend or purge their dead letters. Reads
// answer from this node's replica; changes are proposed by the leader.

// handleConsumerGroups lists consumer groups: all, a subject's, or one.
func (n *Node) handleConsumerGroups(p []byte) ([]byte, error) {
	var req transport.ConsumerGroupsRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	var infos []fsm.ConsumerGroupInfo
	if req.ConsumerGroup != "" {
		if g, ok := n.fsm.ConsumerGroup(req.Subject, req.ConsumerGroup); ok {
			info := n.consumerGroupInfo(g)
			info.Members = n.members(req.Subject, req.ConsumerGroup)
			return json.Marshal([]transport.ConsumerGroupInfo{info})
		}
	} else {
		for _, g := range n.fsm.ConsumerGroups() {
			if req.Subject == "" || g.Subject == req.Subject {
				infos = append(infos, g)
			}
		}
	}
	// The reply is a JSON array, built one group at a time so that a
	// listing too large for a frame stops at the bound.
	out := append(make([]byte, 0, 64<<10), '[')
	for i, g := range infos {
		b, err := json.Marshal(n.consumerGroupInfo(g))
		if err != nil {
			return nil, err
		}
		if len(out)+len(b)+2 > maxGroupsReply {
			return nil, transport.Errorf(transport.TooLarge, "consumer groups: a listing of %d groups is over %d bytes: list one subject's groups (at most %d)",
				len(infos), maxGroupsReply, limits.MaxConsumerGroupsPerSubject)
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	return append(out, ']'), nil
}

// maxGroupsReply bounds a listing of consumer groups, well within a frame:
// a subject's groups, at most limits.MaxConsumerGroupsPerSubject of the
// longest names, take about 3 MiB.
const maxGroupsReply = transport.DefaultMaxFrame / 2

func (n *Node) consumerGroupInfo(g fsm.ConsumerGroupInfo) transport.ConsumerGroupInfo {
	s := g.Settings
	info := transport.ConsumerGroupInfo{BrokerGroup: n.cfg.BrokerGroup, Subject: g.Subject, ConsumerGroup: g.ConsumerGroup,
		Settings: transport.ConsumerGroupSettings{MaxDeliveries: s.MaxDeliveries, RetryFirst: millis(s.RetryFirst),
			RetryMax: millis(s.RetryMax), AckWait: millis(s.AckWait), MaxInFlight: s.MaxInFlight, IdleExpiry: millis(s.IdleExpiry)},
		Cursor: g.Cursor, End: g.End, Backlog: g.Backlog, Redeliver: g.Redeliver, Retrying: g.Retrying, Unacked: g.Unacked,
		Lag: g.Lag(), Consumers: g.Consumers, DeadLetters: g.DeadLetters, DeadDropped: g.DeadDropped, Lost: g.Lost}
	if g.Consumers == 0 {
		info.IdleSince = time.UnixMilli(g.IdleSince).UTC()
	}
	return info
}

// members lists the registered consumers of one group (at most
// limits.MaxConsumersPerGroup): how many messages each holds in flight,
// and when the leader's session last heard from it.
func (n *Node) members(subject, group string) []transport.ConsumerMember {
	now := n.clock.now()
	var out []transport.ConsumerMember
	for _, c := range n.fsm.ConsumersOf(subject, group) {
		m := transport.ConsumerMember{Name: c.Name, InFlight: c.InFlight, SeenMillis: -1}
		if n.isLeader() {
			id := fsm.ConsumerID{Subject: subject, ConsumerGroup: group, Consumer: c.Name}
			n.sessions.mu.Lock()
			if t, ok := n.sessions.seen[id]; ok && !t.IsZero() {
				m.SeenMillis = max(0, now.Sub(t).Milliseconds())
			}
			n.sessions.mu.Unlock()
		}
		out = append(out, m)
	}
	return out
}

func millis(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// handleSetConsumerGroup changes a group's settings.
func (n *Node) handleSetConsumerGroup(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.SetConsumerGroupRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	cmd := &fsm.SetConsumerGroup{Subject: req.Subject, ConsumerGroup: req.ConsumerGroup, Start: fsm.StartPosition(req.Start)}
	if req.Start == transport.StartAtTime {
		cmd.StartAt = req.StartAt.UnixMilli()
	}
	if req.MaxDeliveries != nil {
		cmd.Set, cmd.Settings.MaxDeliveries = cmd.Set|fsm.SetMaxDeliveries, *req.MaxDeliveries
	}
	for _, d := range []struct {
		v   *time.Duration
		bit fsm.SettingBits
		to  *int64
	}{{req.RetryFirst, fsm.SetRetryFirst, &cmd.Settings.RetryFirst}, {req.RetryMax, fsm.SetRetryMax, &cmd.Settings.RetryMax},
		{req.AckWait, fsm.SetAckWait, &cmd.Settings.AckWait}, {req.IdleExpiry, fsm.SetIdleExpiry, &cmd.Settings.IdleExpiry}} {
		if d.v != nil {
			cmd.Set, *d.to = cmd.Set|d.bit, d.v.Milliseconds()
		}
	}
	if req.MaxInFlight != nil {
		cmd.Set, cmd.Settings.MaxInFlight = cmd.Set|fsm.SetMaxInFlight, *req.MaxInFlight
	}
	return n.proposeConsumerGroupChange(ctx, func(now int64) []byte { cmd.Now = now; return cmd.Encode() }, req.Subject, "consumer group settings changed")
}

// handleResetConsumerGroup moves a group's cursor.
func (n *Node) handleResetConsumerGroup(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.ResetConsumerGroupRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	cmd := &fsm.ResetConsumerGroup{Subject: req.Subject, ConsumerGroup: req.ConsumerGroup, To: fsm.StartPosition(req.To)}
	if req.To == transport.StartAtTime {
		cmd.At = req.At.UnixMilli()
	}
	return n.proposeConsumerGroupChange(ctx, func(now int64) []byte { cmd.Now = now; return cmd.Encode() }, req.Subject, "consumer group reset")
}

// proposeConsumerGroupChange proposes an operator's change to a group; apply
// checks the content.
func (n *Node) proposeConsumerGroupChange(ctx context.Context, encode func(now int64) []byte, subject, what string) ([]byte, error) {
	resp, err := n.proposeAsLeader(ctx, encode)
	if err != nil {
		return nil, err
	}
	n.log.Info(what, "subject", subject)
	n.notify.kick(subject)
	r, ok := resp.(*fsm.ConsumerGroupResult)
	if !ok {
		r = &fsm.ConsumerGroupResult{}
	}
	return json.Marshal(transport.ConsumerGroupResult{Created: r.Created})
}

// proposeAsLeader proposes an operator's command, refused before proposing
// if this node does not lead, stamped with the leader's anchored clock.
func (n *Node) proposeAsLeader(ctx context.Context, encode func(now int64) []byte) (any, error) {
	if !n.isLeader() {
		return nil, n.notLeader()
	}
	if err := n.clockReady(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	return n.propose(ctx, encode(n.clock.now().UnixMilli()))
}

// maxDeadLetterPage bounds the dead letters one list answers.
const maxDeadLetterPage = limits.MaxDeadLetterPage

// handleDeadLetters lists a group's dead letters, or reads one whole. An
// application reads those of a consumer group it may consume as: they are
// messages that group failed to consume, and another group's are not its
// own (so the check is the group's, finer than a listing's of stored
// messages, which asks only for the subject).
func (n *Node) handleDeadLetters(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.DeadLettersRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if err := fsm.CheckName("subject", req.Subject); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	if err := accessOf(ctx).consume(transport.TypeDeadLetters, req.Subject, req.ConsumerGroup); err != nil {
		return nil, err
	}
	page := &transport.DeadLetterPage{BrokerGroup: n.cfg.BrokerGroup, Letters: []transport.DeadLetter{}} // a list in JSON, empty or not
	if req.Seq != nil {
		_, page.Total = n.fsm.DeadLetters(req.Subject, req.ConsumerGroup, 0, 0)
		if d, ok := n.fsm.DeadLetterOf(req.Subject, req.ConsumerGroup, *req.Seq); ok {
			letter, err := n.deadLetter(ctx, req.Subject, d, true)
			if err != nil {
				return nil, err
			}
			page.Letters = append(page.Letters, letter)
		}
		out, err := json.Marshal(page)
		if err == nil && len(out) > maxDeadLetterReply {
			return nil, transport.Errorf(transport.TooLarge, "dead letter %d of %s: its message makes a reply of %d bytes, over %d: "+
				"list it for its id and size, or resend it to its group to consume it", *req.Seq, req.Subject, len(out), maxDeadLetterReply)
		}
		return out, err
	}
	limit := req.Limit
	if limit <= 0 || limit > maxDeadLetterPage {
		limit = maxDeadLetterPage
	}
	list, total := n.fsm.DeadLetters(req.Subject, req.ConsumerGroup, req.Offset, limit)
	page.Total = total
	read := 0
	for _, d := range list {
		if read >= maxDeadLetterPageRead {
			break // the rest on the next page
		}
		letter, err := n.deadLetter(ctx, req.Subject, d, false)
		if err != nil {
			return nil, err
		}
		read += letter.Size
		page.Letters = append(page.Letters, letter)
	}
	return json.Marshal(page)
}

// maxDeadLetterPageRead bounds the message bytes one list reads to
// describe its dead letters (it answers at least one): a page of large
// messages is shorter.
const maxDeadLetterPageRead = 64 << 20

// maxDeadLetterReply bounds a dead letter read whole: a frame, less its
// envelope. Its body grows by a third in base64, and property values by
// up to six times in JSON escapes, so the largest messages do not fit.
const maxDeadLetterReply = limits.MaxFrame - limits.Envelope

// deadLetter describes a dead letter, reading its message (whole with
// full) from the message log, its bytes taken from the client memory
// budget while it is read and, unless full, given back once it is
// described. A message retention removed is marked so.
func (n *Node) deadLetter(ctx context.Context, subject string, d fsm.DeadLetter, full bool) (transport.DeadLetter, error) {
	out := transport.DeadLetter{Seq: d.Seq, Deliveries: d.Deliveries, At: time.UnixMilli(d.At).UTC()}
	at, err := n.fsm.Locate(subject, d.Seq)
	var m *message.Message
	if err == nil {
		if err := transport.Reserve(ctx, int64(at.Size)); err != nil {
			return out, err
		}
		m, err = n.fsm.ReadMessage(at)
		if !full {
			defer transport.Release(ctx, int64(at.Size))
		}
	}
	if errors.Is(err, logs.ErrRetained) || errors.Is(err, logs.ErrBeyondEnd) {
		out.Removed = true
		return out, nil
	}
	if err != nil {
		return out, transport.Errorf(transport.Internal, "reading dead letter %d of %s: %v", d.Seq, subject, err)
	}
	out.ID, out.Tags, out.Size, out.CreatedAt = m.ID, m.Tags, at.Size, time.UnixMilli(m.CreatedAt).UTC()
	if full {
		out.Body = m.Body
		out.Properties = map[string]string{}
		for _, p := range m.Properties {
			out.Properties[p.Key] = p.Value
		}
	}
	return out, nil
}

// handleDeadLetterOp resends or purges dead letters.
func (n *Node) handleDeadLetterOp(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.DeadLetterOpRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	cmd := &fsm.DeadLetters{Subject: req.Subject, ConsumerGroup: req.ConsumerGroup, All: req.All, Seqs: req.Seqs}
	if acc := accessOf(ctx); acc != nil && n.fsm.ActiveVersion() >= version.V2 {
		// For the messages' timelines; below version 2 (DeadLetters
		// version 2) a group keeps none.
		cmd.By = acc.who[:min(len(acc.who), fsm.MaxBy)]
	}
	switch req.Op {
	case transport.DeadLetterResend:
		cmd.Op = fsm.DeadResend
	case transport.DeadLetterPurge:
		cmd.Op = fsm.DeadPurge
	default:
		return nil, transport.Errorf(transport.Invalid, "dead letters: unknown operation %q (resend or purge)", req.Op)
	}
	if len(req.Seqs) > fsm.MaxDeadLetterSeqs {
		return nil, transport.Errorf(transport.Invalid, "dead letters: %d sequences (at most %d)", len(req.Seqs), fsm.MaxDeadLetterSeqs)
	}
	resp, err := n.proposeAsLeader(ctx, func(now int64) []byte { cmd.Now = now; return cmd.Encode() })
	if err != nil {
		return nil, err
	}
	r := resp.(*fsm.DeadLettersResult)
	n.log.Info("dead letters "+string(req.Op), "subject", req.Subject, "consumer-group", req.ConsumerGroup, "messages", r.Done)
	if req.Op == transport.DeadLetterResend {
		n.notify.kick(req.Subject)
	}
	return json.Marshal(transport.DeadLetterOpResult{Done: r.Done})
}

// handleForgetConsumerGroup removes a consumer group from the group's state.
func (n *Node) handleForgetConsumerGroup(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.ForgetConsumerGroupRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	cmd := &fsm.Forget{Subject: req.Subject, ConsumerGroup: req.ConsumerGroup}
	if err := fsm.CheckName("subject", req.Subject); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	if err := fsm.CheckName("consumer group", req.ConsumerGroup); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	resp, err := n.proposeAsLeader(ctx, func(now int64) []byte { cmd.Now = now; return cmd.Encode() })
	if err != nil {
		return nil, err
	}
	r := resp.(*fsm.ForgetResult)
	if r.Known {
		n.log.Info("consumer group forgotten", "subject", req.Subject, "consumer-group", req.ConsumerGroup, "consumers", r.Consumers, "unacked", r.Unacked)
	}
	return json.Marshal(transport.ForgetConsumerGroupResult{Known: r.Known, Consumers: r.Consumers, Unacked: r.Unacked})
}

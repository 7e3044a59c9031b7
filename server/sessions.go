package server

import (
	"context"
	"sync"
	"time"

	"github.com/qmqgo/qmq/fsm"
)

// sessions is the leader's view of which consumers are alive. Every pull,
// ack and heartbeat touches a consumer's session; one that stays silent for
// SessionTimeout has its unacked messages reclaimed for the rest of its
// group, and it is forgotten. Sessions are soft state: a new leader starts
// every registered consumer with a fresh timeout, so that one that went
// silent under the old leader (with or without unacked messages) is
// reclaimed too, and registrations do not pile up. Only registered
// consumers have sessions: a request naming one the state machine does not
// know adds nothing here.
type sessions struct {
	n    *Node
	mu   sync.Mutex
	seen map[fsm.ConsumerID]time.Time
}

func newSessions(n *Node) *sessions {
	return &sessions{n: n, seen: map[fsm.ConsumerID]time.Time{}}
}

// touch records a sign of life of a registered consumer; a consumer the
// state machine does not know is left out.
func (s *sessions) touch(id fsm.ConsumerID) {
	if s.n.fsm.Epoch(id) == 0 {
		return
	}
	now := s.n.clock.now()
	s.mu.Lock()
	s.seen[id] = now
	s.mu.Unlock()
}

// run expires sessions until ctx (the leadership) ends.
func (s *sessions) run(ctx context.Context) {
	// Apply everything the old leader committed first: a consumer it handed
	// entries to just before failing must be among those seeded below.
	if !s.n.caughtUp(ctx) {
		return
	}
	now := s.n.clock.now()
	s.mu.Lock()
	for _, id := range s.n.fsm.Consumers() {
		if _, ok := s.seen[id]; !ok {
			s.seen[id] = now
		}
	}
	s.mu.Unlock()
	tick := time.NewTicker(max(s.n.cfg.SessionTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			s.mu.Lock()
			clear(s.seen)
			s.mu.Unlock()
			return
		case <-tick.C:
			for _, id := range s.expired() {
				if epoch := s.n.fsm.Epoch(id); epoch != 0 { // else it never pulled, or was reclaimed already
					s.reclaim(ctx, id, epoch)
				}
			}
		}
	}
}

func (s *sessions) expired() []fsm.ConsumerID {
	cutoff := s.n.clock.now().Add(-s.n.cfg.SessionTimeout)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []fsm.ConsumerID
	for id, t := range s.seen {
		if t.Before(cutoff) {
			out = append(out, id)
			delete(s.seen, id)
		}
	}
	return out
}

// reclaim proposes the Reclaim of one registration (epoch) of a consumer:
// a proposal that commits late, after the consumer registered afresh,
// leaves the new registration be.
func (s *sessions) reclaim(ctx context.Context, id fsm.ConsumerID, epoch uint64) {
	cmd := &fsm.Reclaim{Now: s.n.clock.now().UnixMilli(), Subject: id.Subject, ConsumerGroup: id.ConsumerGroup, Consumer: id.Consumer, Epoch: epoch}
	resp, err := s.n.propose(ctx, cmd.Encode())
	if err != nil {
		s.n.log.Warn("reclaiming an expired consumer; will retry", "consumer", id.Consumer, "consumer_group", id.ConsumerGroup, "subject", id.Subject, "error", err)
		s.mu.Lock()
		if _, alive := s.seen[id]; !alive {
			s.seen[id] = time.Time{} // still expired: the next tick tries again
		}
		s.mu.Unlock()
		return
	}
	r := resp.(*fsm.ReclaimResult)
	if r.Reclaimed > 0 {
		s.n.log.Info("consumer session expired: messages reclaimed for its group",
			"consumer", id.Consumer, "consumer_group", id.ConsumerGroup, "subject", id.Subject, "messages", r.Reclaimed)
		s.n.notify.kick(id.Subject)
	}
	if r.Forgotten {
		s.n.forgotten.report(id.Subject, id.ConsumerGroup)
	}
}

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/transport"
)

// A new leader anchors its term clock before it stamps or fires anything:
// it reads the wall clocks of its group's voters (request TypeTime) and
// holds its own to the safe estimate clockEstimate makes of them, so a
// node whose clock is already ahead when it is elected does not fire
// delayed messages early, empty the dedup window early or expire data by
// age early.
const (
	// clockReadTimeout bounds one round of clock readings.
	clockReadTimeout = time.Second
	// clockGraceMin is the least a round waits, once a quorum has
	// answered, for the other voters (it waits as long again as the quorum
	// took, which is about one round trip).
	clockGraceMin = 10 * time.Millisecond
	// clockWait is how long a request that needs the clock waits for the
	// new leader's anchor before it is refused with UNAVAILABLE.
	clockWait = time.Second
	// anchorGiveUp is how long a new leader tries to read a quorum of
	// clocks before it hands leadership to another voter (once a term).
	anchorGiveUp = 10 * time.Second
	// clockWarnOffset is how far this node's clock may stand from its
	// group's estimate, or the group's time from the anchored clock,
	// before a warning is logged.
	clockWarnOffset = time.Second
)

// ErrTooFewReadings means fewer voters answered a clock reading than a
// quorum of the group.
var ErrTooFewReadings = errors.New("server: too few clock readings for a quorum")

// clockEstimate returns a time no later than at least one correct clock's
// of a group of voters, from readings (Unix ms) taken from some of them:
// with r readings and f = (voters-1)/2 clocks allowed to be wrong, the
// (r-f)-th smallest. At most f of the f+1 readings at or above it are
// wrong, so one at or above it is correct. It needs readings from a quorum
// (voters/2+1), which makes r-f at least 1; a one-node group's estimate is
// its own clock.
func clockEstimate(readings []int64, voters int) (int64, error) {
	if voters < 1 || len(readings) < voters/2+1 || len(readings) > voters {
		return 0, fmt.Errorf("%w: %d readings of %d voters", ErrTooFewReadings, len(readings), voters)
	}
	sorted := slices.Sorted(slices.Values(readings))
	f := (voters - 1) / 2
	return sorted[len(sorted)-f-1], nil
}

// timeReply is the body of a TypeTime response.
type timeReply struct {
	UnixMS int64 `json:"unix_ms"` // the node's configured clock (Config.Now)
}

// handleTime answers a clock reading with this node's configured clock, as
// any broker node does, leader or not.
func (n *Node) handleTime(p []byte) ([]byte, error) {
	if len(p) != 0 {
		return nil, transport.Errorf(transport.Invalid, "a time request has no payload (got %d bytes)", len(p))
	}
	return json.Marshal(timeReply{UnixMS: n.cfg.Now().UnixMilli()})
}

// clockReady waits, up to clockWait, until the leader's clock is anchored
// for its current term; a leader still reading its group's clocks is
// UNAVAILABLE after that, which clients retry.
func (n *Node) clockReady(ctx context.Context) error {
	var timeout <-chan time.Time
	for {
		ok, anchored := n.clock.anchoredFor(n.raft.CurrentTerm())
		if ok {
			return nil
		}
		if timeout == nil {
			t := time.NewTimer(clockWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-anchored:
		case <-timeout:
			return transport.Errorf(transport.Unavailable, "leader starting: node %s is reading its group's clocks", n.cfg.ID)
		case <-ctx.Done():
			return transport.Errorf(transport.Unavailable, "node is shutting down")
		}
	}
}

// anchorClock anchors the term clock for term at min(this node's clock,
// the estimate of its group's), reading the voters' clocks until a quorum
// answers or ctx (the term) ends; it reports whether it anchored.
func (n *Node) anchorClock(ctx context.Context, term uint64) bool {
	began, handedOver := time.Now(), false
	for attempt := 1; ; attempt++ {
		r, err := n.readClocks(ctx)
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			bound := min(r.own, r.estimate)
			n.clock.anchor(term, time.UnixMilli(bound), r.at)
			off := time.Duration(r.own-r.estimate) * time.Millisecond
			n.clock.offsetMs.Store(r.own - r.estimate)
			if off > clockWarnOffset || off < -clockWarnOffset {
				n.log.Warn("this node's clock differs from its group's; the term clock is held to the earlier",
					"own-clock", time.UnixMilli(r.own).UTC(), "group-estimate", time.UnixMilli(r.estimate).UTC(),
					"offset", off, "readings", r.readings, "voters", r.voters)
			}
			n.log.Info("clock anchored", "term", term, "readings", r.readings, "voters", r.voters,
				"offset", off, "took", time.Since(began).Round(time.Microsecond))
			return true
		}
		n.log.Warn("reading the group's clocks; trying again", "attempt", attempt, "error", err)
		if time.Since(began) >= anchorGiveUp && !handedOver {
			// Raft works, but this node cannot reach its voters' client
			// ports: another voter may, and a leader that serves nothing
			// time-dependent holds the whole group up.
			n.handOver(fmt.Sprintf("this leader could not read a quorum of its voters' clocks in %s", anchorGiveUp))
			handedOver = true
		}
		if !wait.Sleep(ctx, min(time.Duration(attempt)*100*time.Millisecond, time.Second)) {
			return false
		}
	}
}

// clockRound is the outcome of one round of clock readings.
type clockRound struct {
	own, estimate    int64     // Unix ms, as of at
	at               time.Time // time.Now() when own was read
	readings, voters int
}

// readClocks reads this node's clock and its group's voters', and returns
// the estimate of the group's. A follower's reading is aged by the time
// since it arrived (it was taken before then, so this errs late), but not
// corrected for the round trip (that would err early).
func (n *Node) readClocks(ctx context.Context) (clockRound, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return clockRound{}, fmt.Errorf("server: reading the group's configuration: %w", err)
	}
	voters := 1 // this node, which leads, whatever its configuration says
	var addrs []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == n.cfg.ID {
			continue
		}
		voters++
		if a := n.fsm.MemberAddr(string(s.ID)); a != "" {
			addrs = append(addrs, a)
		}
	}
	type reading struct {
		ms  int64
		at  time.Time
		old bool // the node does not know the time request (an older version)
	}
	rctx, cancel := context.WithTimeout(ctx, clockReadTimeout)
	defer cancel()
	answers := make(chan *reading, len(addrs)) // nil: no reading
	for _, a := range addrs {
		go func() {
			ms, err := n.readClock(rctx, a)
			switch {
			case transport.CodeOf(err) == transport.UnknownType:
				answers <- &reading{at: time.Now(), old: true}
			case err != nil:
				answers <- nil
			default:
				answers <- &reading{ms: ms, at: time.Now()}
			}
		}()
	}
	start := time.Now()
	quorum := voters/2 + 1
	var got []reading
	var grace <-chan time.Time
collect:
	for pending := len(addrs); pending > 0; {
		select {
		case r := <-answers:
			pending--
			if r != nil {
				got = append(got, *r)
			}
			if grace == nil && len(got)+1 >= quorum {
				t := time.NewTimer(max(time.Since(start), clockGraceMin))
				defer t.Stop()
				grace = t.C
			}
		case <-grace:
			break collect
		case <-rctx.Done():
			break collect
		}
	}
	at := time.Now()
	own := n.cfg.Now().UnixMilli()
	readings := []int64{own}
	old := 0
	for _, r := range got {
		if r.old {
			// It cannot vouch for a time; this node's own clock stands in
			// for it, as it did before voters were asked.
			readings = append(readings, own)
			old++
			continue
		}
		readings = append(readings, r.ms+at.Sub(r.at).Milliseconds())
	}
	if old > 0 {
		n.log.Warn("voters without the time request (an older version) count as agreeing with this node's clock", "voters", old)
	}
	est, err := clockEstimate(readings, voters)
	if err != nil {
		return clockRound{}, err
	}
	return clockRound{own: own, estimate: est, at: at, readings: len(readings), voters: voters}, nil
}

// readClock asks the broker node at addr for its clock.
func (g *raftGroup) readClock(ctx context.Context, addr string) (int64, error) {
	conn, err := g.dial.Dial(ctx, addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	body, err := conn.Call(ctx, transport.TypeTime, nil)
	if err != nil {
		return 0, err
	}
	var r timeReply
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("server: time reply from %s: %w", addr, err)
	}
	return r.UnixMS, nil
}

// checkGroupTime warns when the group's time, once the entries committed
// before the term are applied, is well ahead of the anchored
// clock: an earlier leader's clock ran ahead. Apply clamps the stamps
// (time in the state never goes back), so dedup expiry and retention wait
// for the anchored clock to catch up, and delayed messages still fire by
// it.
func (n *Node) checkGroupTime(ctx context.Context) {
	if !n.caughtUp(ctx) {
		return
	}
	seen, now := n.fsm.StampedTime(), n.clock.now().UnixMilli()
	if ahead := time.Duration(seen-now) * time.Millisecond; ahead > clockWarnOffset {
		n.log.Warn("the group's time is ahead of this leader's clock: an earlier leader's clock ran ahead",
			"group-time", time.UnixMilli(seen).UTC(), "clock", time.UnixMilli(now).UTC(), "ahead", ahead)
	}
}

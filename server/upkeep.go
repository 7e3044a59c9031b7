package server

import (
	"context"
	"time"

	"github.com/qmqgo/qmq/fsm"
)

// upkeepEvery is how often a leader looks for messages past their ack wait
// and groups past their idle expiry.
const upkeepEvery = time.Second

// maxOverdue bounds the overdue messages one upkeep round hands back; the
// rest wait for the next round.
const maxOverdue = 100000

// runUpkeep, on the leader, hands leadership over when its disk is too
// short to apply (handOverIfStarved), hands back to their group the messages whose
// ack wait has passed (an Expire per consumer) and forgets the groups idle
// longer than their idle expiry (a conditional Forget), until ctx (the
// leadership) ends. Both decisions are checked again in apply against the
// leader-stamped time, so a late proposal changes nothing that no longer
// qualifies.
func (n *Node) runUpkeep(ctx context.Context) {
	tick := time.NewTicker(upkeepEvery)
	defer tick.Stop()
	var handedOver time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n.handOverIfStarved(&handedOver)
		now := n.clock.now().UnixMilli()
		if !n.expireOverdue(ctx, now) {
			return
		}
		for _, g := range n.fsm.IdleConsumerGroups(now) {
			cmd := &fsm.Forget{Now: now, Subject: g.Subject, ConsumerGroup: g.ConsumerGroup, IdleFor: g.IdleFor}
			resp, err := n.propose(ctx, cmd.Encode())
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			if r, ok := resp.(*fsm.ForgetResult); ok && r.Known {
				n.log.Info("idle consumer group forgotten", "subject", g.Subject, "consumer_group", g.ConsumerGroup, "idle-for", millis(g.IdleFor))
				n.forgotten.report(g.Subject, g.ConsumerGroup)
			}
		}
	}
}

// expireOverdue proposes an Expire for each consumer holding messages past
// their ack wait at now (or whose deadline bound passed with none: see
// fsm.Overdue); a consumer holding nothing costs none. False once ctx (the
// leadership) ended.
func (n *Node) expireOverdue(ctx context.Context, now int64) bool {
	for _, o := range n.fsm.Overdue(now, maxOverdue) {
		cmd := &fsm.Expire{Now: now, Subject: o.ID.Subject, ConsumerGroup: o.ID.ConsumerGroup, Consumer: o.ID.Consumer, Epoch: o.Epoch, Ranges: o.Ranges}
		resp, err := n.propose(ctx, cmd.Encode())
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			// Refused (the consumer went meanwhile) or not committed: the
			// next round looks again.
			n.log.Debug("handing back messages past their ack wait", "subject", o.ID.Subject, "consumer-group", o.ID.ConsumerGroup, "error", err)
			continue
		}
		if r, ok := resp.(*fsm.ExpireResult); ok && r.Expired+r.Dead > 0 {
			n.metrics.expired.Add(float64(r.Expired + r.Dead))
			n.notify.kick(o.ID.Subject)
		}
	}
	return true
}

package server

import "context"

// What a broker node runs while it leads its group, started by
// watchLeadership (raftgroup.go) at each election it wins and stopped, by
// the cancellation of ctx, when it loses leadership or closes. Each loop
// started here is one duty of the leader; the file of each says more:
//
//	announce        raftgroup.go     record this node's client address in the group's state
//	caughtUp        raftgroup.go     apply every entry of earlier terms first
//	recordIdentity  identity.go      the group's identity, once per group
//	seedFirst       brokerconfig.go  a group without a configuration gets one
//	anchorClock     clock_anchor.go  the term clock, before anything timed
//	sessions.run    sessions.go      expire consumers that stopped beating
//	runUpkeep       upkeep.go        ack-wait expiry, idle consumer groups
//	runDelays       delays.go        fire delayed messages when due
//	checkGroupTime  clock_anchor.go  the group's clocks agree

// startLeading starts the broker leader's work for one term. A group
// without a configuration is given this node's first (seedBrokerConfig).
// What depends on the clock (session expiry, the delay wheel, and the
// requests clockReady holds back) starts once the term clock is anchored
// to the group's clocks.
func (n *Node) startLeading(ctx context.Context) {
	term := n.raft.CurrentTerm()
	if n.applyWaiting.Load() {
		n.handOver("this node was elected while it waits for disk space to apply")
	}
	n.goLoop(func() { n.announce(ctx, n.clientAddr) })
	n.goLoop(func() {
		if n.caughtUp(ctx) {
			// A group this node just formed starts at this build's newest
			// version, before it takes a send: its first messages have
			// their timelines.
			n.seedVersion(ctx)
			n.appliedTerm.Store(term) // refuseSend can look in the state
		}
	})
	n.goLoop(func() { n.recordIdentity(ctx) })
	n.goLoop(func() {
		// A group without a configuration gets this node's first, so that
		// what it serves next applies by it.
		logged := false
		seeded := n.seedFirst(ctx, &logged)
		// A node closing cancels ctx before it stops Raft: loops started
		// after that would wait on a barrier Raft may never answer.
		if ctx.Err() != nil || !n.anchorClock(ctx, term) || ctx.Err() != nil {
			return
		}
		n.goLoop(func() { n.sessions.run(ctx) })
		n.goLoop(func() { n.runUpkeep(ctx) })
		n.goLoop(func() { n.runDelays(ctx) })
		n.goLoop(func() { n.checkGroupTime(ctx) })
		if seeded != nil {
			n.goLoop(func() { n.keepSeeding(ctx, &logged) })
		}
	})
}

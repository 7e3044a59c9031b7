// Package metaserver is the metaserver's logic: what one member of the
// metaserver group does with the requests it receives, over the fsm/meta
// state machine its Raft group replicates.
//
// Its leader answers where subjects live, assigning a new subject to the
// least loaded writable, available broker groups on its first use (one
// assignment at a time, proposed only if the subject is still new);
// records consumer groups per subject; registers broker nodes and keeps
// their heartbeats, which say which groups are alive, who leads them and
// how loaded they are (soft state: never replicated, started afresh by
// each new leader); keeps the application registry, making each secret
// on the leader and proposing only its hash; and answers the cluster view
// operators read. It serves only once it has applied every entry of
// earlier terms (Lead, Ready), and counts requests and refusals at
// applications' limits (Collectors).
//
// The package knows nothing of listeners, TLS or how Raft is opened. The
// node that hosts it (server.MetaNode) gives it the state machine and a
// Group: propose a meta command, leadership, a barrier, the node's status
// and the membership requests every Raft group answers alike; it serves
// Server.Handle on its client listener behind its guard.
//
//	srv := metaserver.New(cfg, fsm, group)
//	registry.MustRegister(srv.Collectors()...)
//	// on becoming leader, for the term ctx lasts:
//	if srv.Lead(ctx) { /* record this node's address */ }
//	// each client request:
//	body, err := srv.Handle(ctx, t, payload)
//
// DESIGN.md walks a producer's first route request from the client's
// frame to the reply, and says why each piece is built the way it is.
package metaserver

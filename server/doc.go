// Package server holds the two kinds of node of a cluster, each one member
// of a Raft group (hashicorp/raft over a TCP transport; raft-wal as log and
// stable store for broker groups, raft-boltdb for the metaserver and for
// broker data directories from before raft-wal) serving the client
// protocol of package transport and an admin HTTP listener with /status
// and /metrics.
//
// A broker node (Node, New) is a member of a broker group over the fsm
// package's state machine. Its leader packs concurrent sends into one Raft
// entry (group commit), answers each send only after its entry is committed
// and applied, serves long-poll pulls, and reclaims the unacked messages of
// consumers whose sessions expired. With a metaserver configured it
// registers there, heartbeats, refuses sends while its group is drained,
// and forwards clients' metaserver requests.
//
// A metaserver node (MetaNode, NewMeta) is a member of the metaserver group
// over the fsm/meta state machine, running package metaserver's logic: it
// assigns subjects to broker groups, tracks the groups' health from
// heartbeats, keeps the applications, and answers where subjects live.
//
// Followers answer NOT_LEADER with the leader's client address. DESIGN.md
// in this directory explains the choices.
package server

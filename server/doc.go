// Package server is a broker node: one member of a broker group's Raft
// cluster (hashicorp/raft with raft-boltdb as log and stable store, TCP
// transport, the fsm package's hard-link snapshot store), serving the
// client protocol of package transport and an admin HTTP listener with
// /status and /metrics.
//
// The leader packs concurrent sends into one Raft entry (group commit),
// answers each send only after its entry is committed and applied, serves
// long-poll pulls, and reclaims the unacked messages of consumers whose
// sessions expired. Followers answer NOT_LEADER with the leader's client
// address. DESIGN.md in this directory explains the choices.
package server

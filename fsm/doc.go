// Package fsm is a broker group's replicated state machine on
// hashicorp/raft: it applies commands (Append, Pull, Ack, Reclaim) to the
// message log, the consume logs and the pull log of package logs, so that
// every replica that applied the same Raft index holds byte-identical logs.
//
// Nothing here reads the clock, the network or randomness: the leader
// stamps the time into each command. Apply skips entries at or below the
// applied index, which is persisted in a checkpoint together with the log
// ends it describes; on open every log is cut back to the checkpoint and
// Raft replays the rest. Snapshots are the checkpoint plus hard links to the
// segments, kept by package snapshot's store (NewSnapshotStore) and
// streamed to a follower that needs one.
//
// DESIGN.md in this directory explains the choices.
package fsm

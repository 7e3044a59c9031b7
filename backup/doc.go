// Package backup is the file a backup of a group's state is kept in, and
// the client's side of taking one: qmqctl backup writes it (Fetch), qmqd
// restore reads it (Read) and seeds a new group from it.
//
// A backup holds one Raft snapshot of a group, as the group's leader took
// it: the stream its state machine restores from (a broker group's
// fsm/snapshot stream, the metaserver's JSON), in the chunks the leader
// sent, each with its own checksum, between a header that says what the
// snapshot is (the group, its Raft index and term, its configuration, its
// length) and a trailer with the checksum of the whole file (format.go).
//
// Fetch writes FILE.partial and renames it to FILE once it is whole and
// durable. Run again after an interruption it continues the partial file
// from its last whole chunk, if the leader still holds that snapshot, and
// otherwise starts over from a new one, saying so.
package backup

// Package snapshot is how a broker group's state machine (package fsm)
// ships its state between replicas: the stream format of a snapshot (a
// Manifest of the state machine's checkpoint and the files it covers, then
// each file's bytes, each with a CRC32C) and Store, the raft.SnapshotStore
// that keeps snapshots as hard links to the state machine's segments, so
// that taking one copies no data. It knows nothing of the state machine's
// files but a path check the state machine gives it (NewStore, ReadHead),
// which a manifest's every path must pass.
//
// One snapshot, from the leader that takes it to the follower that
// restores it:
//
//   - Raft asks the leader's state machine for a snapshot. fsm's
//     FSM.Snapshot takes its checkpoint, hard-links every segment into a
//     staging directory, each at LinkPath, and lists them, with the sizes
//     the checkpoint covers, in a Manifest.
//   - Raft creates a snapshot in the store (Store.Create, a *Sink) and
//     has the snapshot persist into it. fsm's Persist makes the checkpoint
//     durable, then hands the staging directory to Sink.Adopt, which moves
//     it into the snapshot's directory and writes the manifest beside it.
//     Sink.Close writes raft's metadata (disk.WriteFileAtomic), fsyncs the
//     directories, renames the snapshot into place and reaps all but the
//     newest snapshots, keeping any being read.
//   - A follower needs the snapshot. Raft opens it (Store.Open), which
//     pins it against reaping until the stream is closed, and sends the
//     stream: a goroutine writes it (Write) from the links, the first Size
//     bytes of each file, however far the live segment has grown since.
//   - The follower's raft writes what arrives into its own store's Sink
//     (Sink.Write). As soon as the manifest is in, the sink checks it and
//     its paths, and that the disk has room for twice the stream
//     (Manifest.StreamSize) and SpaceReserve, or refuses with ErrBad or
//     ErrNoSpace, keeping nothing. Close keeps the whole stream as the
//     snapshot, durably.
//   - Raft opens the received snapshot and hands its stream to fsm's
//     FSM.Restore, which reads the manifest (ReadHead, with the same path
//     check), checks the room for its files (Manifest.FilesSize and
//     SpaceReserve, CheckFree), writes them beside its live data
//     (ReadFiles, which checks every checksum), and swaps them in. Closing
//     the stream unpins the snapshot. Before a node starts Raft, fsm's
//     FSM.CatchUp restores the newest stored snapshot in the same way if
//     the state machine is behind it.
//
// The stream's bytes are the wire and storage format: a snapshot written
// by one release is read by the next (TestStreamFormat holds them).
package snapshot

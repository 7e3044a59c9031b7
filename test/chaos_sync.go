package test

import (
	"fmt"
	"strings"
	"time"
)

// syncFault makes one node's checkpoint syncs fail with EIO, as a disk
// that lost a write-back reports it at the next syncfs (qmqd
// --sync-fault-file; the leader half the time), and waits for the node to
// stop by itself at its next checkpoint: its group (Chaos.SyncFaultGroup)
// snapshots every 5–10 s, each snapshot a checkpoint. Fail-stop: the
// replica must neither go on applying nor serve, and its process must exit
// with the failure, its log saying so; a replica that went on would
// record the lost bytes as durable at its next checkpoint. The file is
// then cleared and the node restarted: it opens at its last good
// checkpoint and replays the rest from Raft. Nothing acknowledged may be
// lost, and its replica must end byte-identical to the others'.
func (ch *Chaos) syncFault(c *Cluster) string {
	victim, _, term, role := ch.victim(c)
	victim.ExpectExit()
	at := time.Now()
	victim.FailSyncs(true)
	exited, err := victim.AwaitExit(time.Minute)
	victim.FailSyncs(false)
	if !exited {
		ch.t.Fatalf("%s (%s) still runs a minute after its checkpoint syncs began to fail: fail-stop broken", victim.ID, role)
	}
	stopped := time.Now()
	stoppedAfter := stopped.Sub(at)
	log := victim.LogSinceStart()
	if err == nil {
		ch.t.Fatalf("%s stopped with status 0 after a failed checkpoint sync; its log ends: %s", victim.ID, tail(victim.LogPath, 5))
	}
	if !strings.Contains(log, "failing a checkpoint sync (fault injection)") || !strings.Contains(log, "input/output error") {
		ch.t.Fatalf("%s exited (%v) without its log naming the failed sync; it ends: %s", victim.ID, err, tail(victim.LogPath, 5))
	}
	if strings.HasPrefix(role, "leader") {
		ch.awaitNewLeader(c, term, stopped)
	}
	victim.Restart()
	return fmt.Sprintf("%s (%s): checkpoint syncs failed with EIO; it stopped by itself %s later (%v), then restarted with syncs working",
		victim.ID, role, stoppedAfter.Round(time.Millisecond), err)
}

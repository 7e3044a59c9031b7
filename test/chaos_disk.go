package test

import (
	"fmt"
	"strings"
	"time"
)

// diskFull fills the small disks (Cluster.UseSmallDisks) of one node of a
// broker group, or of every node, for 3–6 s: either under the group's
// send floor (qmqd --min-free-disk), where the leader refuses sends with
// DISK_FULL and consumers are still served, or under the state machine's
// reserve (qmqd --disk-reserve), where a replica waits before applying
// and a leader that must wait hands leadership over. Nothing may be lost,
// no node may stop, and the replicas must end identical.
func (ch *Chaos) diskFull(c *Cluster) string {
	nodes := c.Nodes()
	victims, who := nodes, "every node"
	if ch.rng.IntN(2) == 0 {
		v, _, _, role := ch.victim(c)
		victims, who = []*Node{v}, fmt.Sprintf("%s (%s)", v.ID, role)
	}
	leave, level := ch.DiskFloor/2, "under the send floor"
	if ch.rng.IntN(2) == 0 {
		leave, level = ch.DiskReserve/4, "under the apply reserve"
	}
	d := time.Duration(3000+ch.rng.IntN(3000)) * time.Millisecond
	var did []string
	for _, n := range victims {
		did = append(did, n.FillDisk(leave))
	}
	sleepFor(d)
	for _, n := range victims {
		n.EmptyDisk()
	}
	return fmt.Sprintf("%s's disk %s for %s (%s)", who, level, d, strings.Join(did, "; "))
}

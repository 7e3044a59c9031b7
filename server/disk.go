package server

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/disk"
	"github.com/qmqgo/qmq/transport"
)

// A broker node and its disk. The leader refuses sends with DISK_FULL
// while its data disk has less than Config.MinFreeDisk free,
// well before the state machine's own floor (fsm.Config.DiskReserve, where
// a replica waits before applying), so that consumers are still served
// (pulls and acks write little) and delayed messages still fire. Sends are
// taken again as soon as space returns. A replica whose apply waits for
// space while it leads, or a leader whose disk is under the state
// machine's reserve, hands leadership to another voter, whose disk may
// have room: a leader that cannot apply holds the whole group up. A write
// that fails anyway stops the node (fail-stop, see fsm/diskspace.go).

// diskCheckEvery bounds how often the leader asks the disk for its free
// space: sends in between use the last answer.
const diskCheckEvery = 250 * time.Millisecond

// diskGuard caches the data disk's free space for the send path.
type diskGuard struct {
	probe disk.Probe
	dir   string
	min   int64

	mu      sync.Mutex
	checked time.Time
	free    int64
}

// full reports whether sends must be refused now, and the free bytes.
func (d *diskGuard) full() (bool, int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.checked) >= diskCheckEvery {
		free, err := d.probe(d.dir)
		if err != nil {
			free = disk.Unknown // cannot tell: refuse nothing
		}
		d.free, d.checked = free, time.Now()
	}
	return d.free < d.min, d.free
}

// diskFullError is the error a send gets while the disk is short of space.
func (n *Node) diskFullError(free int64) error {
	return transport.Errorf(transport.DiskFull, "broker node %s of group %s has %d MiB free on its data disk, under its %d MiB floor (--min-free-disk): sends are refused until space is freed",
		n.cfg.ID, n.cfg.BrokerGroup, free>>20, n.cfg.MinFreeDisk>>20)
}

// diskWait hears from the state machine that it waits for disk space
// (waiting) or applies again. A leader that cannot apply hands leadership
// over.
func (n *Node) diskWait(waiting bool) {
	n.applyWaiting.Store(waiting)
	if waiting && n.raft != nil && n.raft.State() == raft.Leader {
		n.handOver("this leader cannot apply for want of disk space")
	}
}

// handOver asks Raft to hand this node's leadership to another voter, in
// the background, saying why in the log.
func (n *Node) handOver(why string) {
	n.log.Warn(why + ": handing leadership to another voter")
	go func() {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.log.Warn("handing leadership over", "error", err)
		}
	}()
}

// starvedHandOverEvery bounds how often a leader short of the space to
// apply hands leadership over: when every voter is short, leadership
// moves among them at this pace, not at every upkeep round.
const starvedHandOverEvery = 10 * time.Second

// handOverIfStarved, on the leader, hands leadership over when its disk
// has less free space than the state machine keeps to apply
// (fsm.Config.DiskReserve): its next entry would wait, and with sends
// refused (the send floor is higher) nothing else might come to make it
// wait and hand over, leaving the group without a leader that can take
// sends while other voters have room. last is when it last did.
func (n *Node) handOverIfStarved(last *time.Time) {
	_, free := n.disk.full()
	if free >= n.cfg.FSM.DiskReserve || time.Since(*last) < starvedHandOverEvery {
		return
	}
	*last = time.Now()
	n.handOver(fmt.Sprintf("this leader's data disk has %d MiB free, under the %d MiB kept to apply entries (--disk-reserve)",
		free>>20, n.cfg.FSM.DiskReserve>>20))
}

// storageFailed hears that the state machine stopped applying because a
// write failed: the node stops, and says so through Failed.
func (n *Node) storageFailed(err error) {
	n.stop(err, func() {
		n.log.Error("the node stops: its state machine stopped applying (restart it once the disk is sound, or rebuild it if the error names another history; it replays from its last checkpoint)", "error", err)
		n.Close()
	})
}

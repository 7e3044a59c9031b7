package fsm

import (
	"fmt"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
)

// appendGroupV4 encodes what checkpoint version 4 adds to a group (see
// checkpoint).
func appendGroupV4(b []byte, g *group) []byte {
	s := g.settings
	for _, v := range []uint64{uint64(s.MaxDeliveries), uint64(s.RetryFirst), uint64(s.RetryMax), uint64(s.AckWait),
		uint64(s.MaxInFlight), uint64(s.IdleExpiry), g.gen, uint64(g.retrying), uint64(g.lost), uint64(g.deadDropped),
		uint64(g.idleSince), uint64(len(g.dead))} {
		b = binenc.AppendUvarint(b, v)
	}
	for _, d := range g.dead {
		b = binenc.AppendUvarint(b, uint64(d.seq))
		b = binenc.AppendUvarint(b, uint64(d.deliveries))
		b = binenc.AppendUvarint(b, uint64(d.at))
	}
	return b
}

// readGroupV4 decodes what appendGroupV4 wrote. Values out of range come
// out out of range (group.check refuses them) or re-encode differently
// (the canonical check refuses them).
func readGroupV4(r *binenc.Reader, g *group) {
	u32 := func() uint32 { return uint32(min(r.Uvarint(), 1<<32-1)) }
	i64 := func() int64 { return int64(r.Uvarint()) }
	g.settings = ConsumerGroupSettings{MaxDeliveries: u32(), RetryFirst: i64(), RetryMax: i64(), AckWait: i64(),
		MaxInFlight: u32(), IdleExpiry: i64()}
	g.gen, g.retrying, g.lost, g.deadDropped, g.idleSince = r.Uvarint(), i64(), i64(), i64(), i64()
	n := r.Count(r.Remaining())
	for i := 0; i < n && r.Err() == nil; i++ {
		g.dead = append(g.dead, deadLetter{seq: i64(), deliveries: u32(), at: i64()})
	}
}

// check refuses a group whose numbers no apply could have left.
func (g *group) check() error {
	if err := g.settings.Check(); err != nil {
		return err
	}
	if g.cursor < 0 || g.retrying < 0 || g.lost < 0 || g.deadDropped < 0 || g.idleSince < 0 {
		return fmt.Errorf("negative counts or cursor")
	}
	for _, r := range g.redeliver {
		if r.seq < 0 || r.deliveries > limits.MaxDeliveries {
			return fmt.Errorf("redelivery of %d after %d deliveries", r.seq, r.deliveries)
		}
	}
	for _, d := range g.dead {
		if d.seq < 0 || d.at < 0 || d.deliveries > limits.MaxDeliveries {
			return fmt.Errorf("dead letter %d after %d deliveries at %d", d.seq, d.deliveries, d.at)
		}
	}
	return nil
}

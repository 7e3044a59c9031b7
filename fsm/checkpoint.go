package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/disk"
	"github.com/qmqgo/qmq/internal/limits"
	qversion "github.com/qmqgo/qmq/internal/version"
)

// checkpoint is the FSM's state at one applied index together with where
// each log ended then. It is written durably at every snapshot (after the
// logs were fsynced) and is the first part of every snapshot's manifest.
//
// Encoding (integers little-endian unless uvarint; strings uvarint-prefixed),
// followed by a crc32c of everything before it:
//
//	version u8 | applied u64 | now i64 | message-end u64 | pull-end u64 | dedup-from i64 |
//	subject-count uvarint | (subject, consume-end u64)…              sorted by subject
//	group-count uvarint | (subject, group, cursor uvarint,
//	                       redeliver-count uvarint, seq uvarint…)…   sorted by subject, group
//	consumer-count uvarint | (epoch uvarint, subject, group, name, ack-pos uvarint, next uvarint,
//	                          window-count uvarint, (seq uvarint, pos uvarint, acked u8)…)…  by epoch
//	member-count uvarint | (id, client-address)…                      sorted by id
//	retain-from u64 |
//	journal-end u64 |                                                 (version 2 on)
//	hour-count uvarint | (hour uvarint, pending uvarint,
//	                      records-end uvarint, dispatched-end uvarint)…  sorted by hour
//	delayed-subject-count uvarint | (subject, pending uvarint)…      sorted by subject
//	next-epoch uvarint                                                (version 3 on)
//	next-gen uvarint | retries uvarint                                (version 4 on)
//	removing u8 | identity | config-source u8 |                       (version 5 on)
//	  unless the source is the node's own (1):
//	  config-index uvarint | retention-age uvarint | retention-bytes uvarint |
//	  dedup-window uvarint | max-pull uvarint | max-unacked uvarint | segment-size uvarint |
//	  index-segment-size uvarint | dedup-floor i64
//	timeline-end u64                                                  (version 6 on)
//	(stored-bytes uvarint)…        one per subject above, in its order (version 7 on)
//	active-version uvarint                                            (version 8 on)
//
// Version 4 adds, to each group, after each redelivery's seq its
// deliveries uvarint, and after the redeliveries:
//
//	max-deliveries uvarint | retry-first uvarint | retry-max uvarint | ack-wait uvarint |
//	max-in-flight uvarint | idle-expiry uvarint | gen uvarint | retrying uvarint |
//	lost uvarint | dead-dropped uvarint | idle-since uvarint |
//	dead-count uvarint | (seq uvarint, deliveries uvarint, at uvarint)…
//
// and to each window entry, after acked: deliveries uvarint | deadline uvarint.
// A group of an earlier version opens with DefaultConsumerGroupSettings, its
// window entries delivered once and without deadline.
//
// Version 5 adds removing: 1 in retention's checkpoint, written before it
// removes segments and adjusts the groups, so that Open makes the same
// removal and adjustments on the same state; 0 otherwise. An earlier
// version opens with 0 (Open then finishes only a removal whose message-log
// segments are still there, as before). And the group's identity (see
// identity.go), "" until recorded; an earlier version opens without one.
// And the broker group's configuration (BrokerConfig, its source and the
// entry that set it); a checkpoint of version 4 or earlier opens with
// ConfigNode, the node's own values, which it applied by, and so does one
// of version 5 that says so (then no values are written: they are each
// node's own).
//
// A checkpoint holding nothing of version 5 (not retention's, no
// identity, the node's own configuration, no application, and every
// hour's count of delayed messages what version 4's derivation gives) is
// still written in version 4, which nodes of the previous release read:
// until the group records its identity and its configuration, a snapshot
// may go to one of them.
//
// Version 6 adds where the timeline log ended (timeline_record.go); a
// checkpoint is written in it once the timeline holds anything, and an
// earlier version opens with an empty timeline.
//
// Version 7 adds the bytes of the messages each subject's consume log
// points at, from its start to its end (subjectLog); a checkpoint is
// written in it once a subject stores any. An earlier version opens
// without them, and Open counts them once from the consume logs
// (countStoredBytes: every retained entry read, 40 bytes of consume log
// per message).
//
// Version 8 adds the group's active version Number (SetVersion); a
// checkpoint is written in it once the state records one (then at V2 or
// later, the timeline's and the stored bytes' Number, whose fields it
// holds too, zero as they may be). A group at no recorded Number (V1)
// writes no timeline and records no stored bytes (FSM.recordsBytes), so
// its checkpoints stay at version 4 or 5, which the release before
// version gates reads. An earlier version opens at no Number.
//
// A version past this build's does not open: ErrNewerData, which names
// it (a newer release wrote it).
//
// Versions 1 to 7 still open. Before version 3 consumers had no epochs:
// the list held every consumer ever registered, by number, a reclaimed one
// as a single 0 byte (and 1 before a live one's fields); consumer number i
// opens as epoch i+1. Version 1 (before delayed messages) ends at
// retain-from.
type checkpoint struct {
	st        *state
	ends      *logEnds
	dedupFrom int64 // message-log offset to rebuild the dedup window from; -1 for none
}

const checkpointVersion = 8

// Limits the decoder holds a checkpoint to.
const (
	maxCheckpointItems = 1 << 26
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadCheckpoint means a checkpoint or snapshot manifest does not decode.
var ErrBadCheckpoint = errors.New("fsm: malformed checkpoint")

// currentCheckpoint returns the FSM's state and its logs' ends now.
func (f *FSM) currentCheckpoint() *checkpoint {
	ends := f.store.ends(f.st.hours)
	if f.recordsBytes() {
		ends.consumeBytes = f.store.allStoredBytes()
	}
	return &checkpoint{st: f.st, ends: ends, dedupFrom: f.dedup.Oldest()}
}

// encode encodes c in the earliest version that holds it (see checkpoint).
func (c *checkpoint) encode() []byte {
	if c.st.version != 0 {
		return c.encodeVersion(checkpointVersion)
	}
	if c.ends.storesBytes() {
		return c.encodeVersion(7)
	}
	if c.ends.timeline != 0 {
		return c.encodeVersion(6)
	}
	if !c.needsVersion5() {
		return c.encodeVersion(4)
	}
	return c.encodeVersion(5)
}

// storesBytes reports whether a consume log's entries point at any bytes
// (version 7).
func (e *logEnds) storesBytes() bool {
	for _, b := range e.consumeBytes { // a map: any will do
		if b != 0 {
			return true
		}
	}
	return false
}

// needsVersion5 reports whether c holds anything version 4 cannot:
// retention's removing, an identity, a configuration other than the
// node's own, an application, or an hour whose count of delayed messages
// the version 4 decoder would not give back (it derives pending plus
// dispatched, which counts an hour's retries too).
func (c *checkpoint) needsVersion5() bool {
	st := c.st
	if st.removing || st.identity != "" || st.config.source != ConfigNode || st.recordsApps() {
		return true
	}
	for h, hs := range st.hours { // a map: any hour will do
		if hs.delayed != derivedDelayed(hs.pending, c.ends.hours[h]) {
			return true
		}
	}
	return false
}

// derivedDelayed is the count of an hour's delayed messages a checkpoint
// of version 4 or earlier opens with: its records pending and fired, an
// upper bound (retries are among them).
func derivedDelayed(pending int64, e delaywheel.HourEnds) int64 {
	return pending + e.Dispatched/delaywheel.DispatchRecordSize
}

func (c *checkpoint) encodeVersion(version byte) []byte {
	st := c.st
	b := []byte{version}
	b = binenc.AppendUint64(b, st.applied)
	b = binenc.AppendUint64(b, uint64(st.now))
	b = binenc.AppendUint64(b, uint64(c.ends.messages))
	b = binenc.AppendUint64(b, uint64(c.ends.pulls))
	b = binenc.AppendUint64(b, uint64(c.dedupFrom))
	subjects := sortedKeys(c.ends.consume)
	b = binenc.AppendUvarint(b, uint64(len(subjects)))
	for _, s := range subjects {
		b = binenc.AppendString(b, s)
		b = binenc.AppendUint64(b, uint64(c.ends.consume[s]))
	}
	groups := st.sortedGroups()
	b = binenc.AppendUvarint(b, uint64(len(groups)))
	for _, k := range groups {
		g := st.groups[k]
		b = binenc.AppendString(b, k.subject)
		b = binenc.AppendString(b, k.group)
		b = binenc.AppendUvarint(b, uint64(g.cursor))
		b = binenc.AppendUvarint(b, uint64(len(g.redeliver)))
		for _, r := range g.redeliver {
			b = binenc.AppendUvarint(b, uint64(r.seq))
			if version >= 4 {
				b = binenc.AppendUvarint(b, uint64(r.deliveries))
			}
		}
		if version >= 4 {
			b = appendGroupV4(b, g)
		}
	}
	b = appendConsumers(b, st, version)
	ids := sortedKeys(st.members)
	b = binenc.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binenc.AppendString(b, id)
		b = binenc.AppendString(b, st.members[id])
	}
	b = binenc.AppendUint64(b, uint64(st.retainFrom))
	if version >= 2 {
		b = binenc.AppendUint64(b, uint64(c.ends.journal))
		hours := slices.Sorted(maps.Keys(st.hours))
		b = binenc.AppendUvarint(b, uint64(len(hours)))
		for _, h := range hours {
			e := c.ends.hours[h]
			b = binenc.AppendUvarint(b, uint64(h))
			b = binenc.AppendUvarint(b, uint64(st.hours[h].pending))
			b = binenc.AppendUvarint(b, uint64(e.Records))
			b = binenc.AppendUvarint(b, uint64(e.Dispatched))
		}
		subjects := sortedKeys(st.delayed)
		b = binenc.AppendUvarint(b, uint64(len(subjects)))
		for _, s := range subjects {
			b = binenc.AppendString(b, s)
			b = binenc.AppendUvarint(b, uint64(st.delayed[s]))
		}
	}
	if version >= 3 {
		b = binenc.AppendUvarint(b, st.nextEpoch)
	}
	if version >= 4 {
		b = binenc.AppendUvarint(b, st.nextGen)
		b = binenc.AppendUvarint(b, uint64(st.retries))
	}
	if version >= 5 {
		removing := byte(0)
		if st.removing {
			removing = 1
		}
		b = append(b, removing)
		b = binenc.AppendString(b, st.identity)
		b = append(b, byte(st.config.source))
		if st.config.source != ConfigNode {
			b = binenc.AppendUvarint(b, st.config.index)
			for _, v := range st.config.values() {
				b = binenc.AppendUvarint(b, uint64(v))
			}
			b = binenc.AppendUint64(b, uint64(st.config.dedupFloor))
		}
		b = appendApps(b, st)
	}
	if version >= 6 {
		b = binenc.AppendUint64(b, uint64(c.ends.timeline))
	}
	if version >= 7 {
		for _, s := range subjects {
			b = binenc.AppendUvarint(b, uint64(c.ends.consumeBytes[s]))
		}
	}
	if version >= 8 {
		b = binenc.AppendUvarint(b, uint64(st.version))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// appendApps encodes the applications the state records (version 5): the
// groups and consumers an application's pull created, the delayed
// messages pending per application, and per hour of delivery time its
// delayed messages, pending or fired, in all and per application, each
// list sorted.
func appendApps(b []byte, st *state) []byte {
	var groups []groupKey
	for _, k := range st.sortedGroups() {
		if st.groups[k].app != "" {
			groups = append(groups, k)
		}
	}
	b = binenc.AppendUvarint(b, uint64(len(groups)))
	for _, k := range groups {
		b = binenc.AppendString(appendNames(b, k.subject, k.group, ""), st.groups[k].app)
	}
	var consumers []*consumer
	for _, cs := range st.sortedConsumers() {
		if cs.app != "" {
			consumers = append(consumers, cs)
		}
	}
	b = binenc.AppendUvarint(b, uint64(len(consumers)))
	for _, cs := range consumers {
		b = binenc.AppendString(binenc.AppendUvarint(b, cs.epoch), cs.app)
	}
	apps := sortedKeys(st.appDelayed)
	b = binenc.AppendUvarint(b, uint64(len(apps)))
	for _, app := range apps {
		b = binenc.AppendUvarint(binenc.AppendString(b, app), uint64(st.appDelayed[app]))
	}
	var hours []int64
	for _, h := range slices.Sorted(maps.Keys(st.hours)) {
		if st.hours[h].delayed > 0 {
			hours = append(hours, h)
		}
	}
	b = binenc.AppendUvarint(b, uint64(len(hours)))
	for _, h := range hours {
		hs := st.hours[h]
		b = binenc.AppendUvarint(binenc.AppendUvarint(b, uint64(h)), uint64(hs.delayed))
		apps := sortedKeys(hs.apps)
		b = binenc.AppendUvarint(b, uint64(len(apps)))
		for _, app := range apps {
			b = binenc.AppendUvarint(binenc.AppendString(b, app), uint64(hs.apps[app]))
		}
	}
	return b
}

// readApps reads what appendApps wrote: a group or consumer it names that
// the checkpoint lacks, or a name that is not one, is an error.
func readApps(r *binenc.Reader, st *state) error {
	for n := r.Count(maxCheckpointItems); n > 0 && r.Err() == nil; n-- {
		subject, group, _ := readNames(r)
		app := r.String(limits.MaxName)
		g := st.groups[groupKey{subject, group}]
		if r.Err() == nil && (g == nil || CheckName("application", app) != nil) {
			return fmt.Errorf("%w: group %s of %s recorded as application %q's", ErrBadCheckpoint, group, subject, app)
		}
		if g != nil {
			g.app = app
		}
	}
	for n := r.Count(maxCheckpointItems); n > 0 && r.Err() == nil; n-- {
		epoch, app := r.Uvarint(), r.String(limits.MaxName)
		cs := st.consumers[epoch]
		if r.Err() == nil && (cs == nil || CheckName("application", app) != nil) {
			return fmt.Errorf("%w: consumer %d recorded as application %q's", ErrBadCheckpoint, epoch, app)
		}
		if cs != nil {
			cs.app = app
		}
	}
	for n := r.Count(maxCheckpointItems); n > 0 && r.Err() == nil; n-- {
		app, pending := r.String(limits.MaxName), int64(r.Uvarint())
		if r.Err() == nil && (CheckName("application", app) != nil || pending <= 0) {
			return fmt.Errorf("%w: %d delayed messages of application %q", ErrBadCheckpoint, pending, app)
		}
		st.appDelayed[app] = pending
	}
	for n := r.Count(maxCheckpointItems); n > 0 && r.Err() == nil; n-- {
		h, delayed := int64(r.Uvarint()), int64(r.Uvarint())
		hs := st.hours[h]
		if r.Err() == nil && (hs == nil || delayed <= 0) {
			return fmt.Errorf("%w: %d delayed messages counted in hour %d", ErrBadCheckpoint, delayed, h)
		}
		var byApp int64
		for k := r.Count(maxCheckpointItems); k > 0 && r.Err() == nil; k-- {
			app, count := r.String(limits.MaxName), int64(r.Uvarint())
			if byApp += count; r.Err() == nil && (CheckName("application", app) != nil || count <= 0 || byApp > delayed) {
				return fmt.Errorf("%w: %d delayed messages of application %q counted in hour %d of %d", ErrBadCheckpoint, count, app, h, delayed)
			}
			if hs.apps == nil {
				hs.apps = map[string]int64{}
			}
			hs.apps[app] = count
		}
		if hs != nil {
			hs.delayed = delayed
		}
	}
	return nil
}

// appendConsumers encodes the consumers: by epoch from version 3, by
// number before it (epoch-1, a gap as a 0 byte).
func appendConsumers(b []byte, st *state, version byte) []byte {
	consumers := st.sortedConsumers()
	if version < 3 {
		b = binenc.AppendUvarint(b, st.nextEpoch-1)
	} else {
		b = binenc.AppendUvarint(b, uint64(len(consumers)))
	}
	next := uint64(1) // before version 3: the epoch the list reached
	for _, c := range consumers {
		if version < 3 {
			for ; next < c.epoch; next++ {
				b = append(b, 0) // a consumer reclaimed
			}
			b = append(b, 1)
			next++
		} else {
			b = binenc.AppendUvarint(b, c.epoch)
		}
		b = appendNames(b, c.key.subject, c.key.group, c.key.name)
		b = binenc.AppendUvarint(b, uint64(c.ackPos))
		b = binenc.AppendUvarint(b, uint64(c.next))
		b = binenc.AppendUvarint(b, uint64(len(c.window)))
		for _, p := range c.window {
			b = binenc.AppendUvarint(b, uint64(p.consumeSeq))
			b = binenc.AppendUvarint(b, uint64(p.pos))
			acked := byte(0)
			if p.acked {
				acked = 1
			}
			b = append(b, acked)
			if version >= 4 {
				b = binenc.AppendUvarint(b, uint64(p.deliveries))
				b = binenc.AppendUvarint(b, uint64(p.deadline))
			}
		}
	}
	if version < 3 {
		for ; next < st.nextEpoch; next++ {
			b = append(b, 0)
		}
	}
	return b
}

func decodeCheckpoint(b []byte) (*checkpoint, error) {
	if len(b) < 5 {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadCheckpoint, len(b))
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrBadCheckpoint)
	}
	r := binenc.NewReader(body)
	version := r.Byte()
	if version > checkpointVersion {
		return nil, fmt.Errorf("%w: the checkpoint is of format %d, written by a newer release; this build (qmq %s) reads formats up to %d: run that release, or a newer one",
			ErrNewerData, version, qversion.String(), checkpointVersion)
	}
	if version < 1 {
		return nil, fmt.Errorf("%w: unknown version %d", ErrBadCheckpoint, version)
	}
	st := newState()
	st.applied = r.Uint64()
	st.now = r.Int64()
	c := &checkpoint{st: st, ends: &logEnds{consume: map[string]int64{}, hours: map[int64]delaywheel.HourEnds{}}}
	c.ends.messages = r.Int64()
	c.ends.pulls = r.Int64()
	c.dedupFrom = r.Int64()
	var subjects []string // in the order written, for version 7's bytes
	for n := r.Count(maxCheckpointItems); n > 0 && r.Err() == nil; n-- {
		subject := r.String(limits.MaxName)
		c.ends.consume[subject] = r.Int64()
		subjects = append(subjects, subject)
	}
	for n := r.Count(maxCheckpointItems); n > 0 && r.Err() == nil; n-- {
		k := groupKey{subject: r.String(limits.MaxName), group: r.String(limits.MaxName)}
		g := &group{cursor: int64(r.Uvarint()), settings: DefaultConsumerGroupSettings()}
		m := r.Count(r.Remaining())
		for i := 0; i < m && r.Err() == nil; i++ {
			rd := redelivery{seq: int64(r.Uvarint())}
			if version >= 4 {
				rd.deliveries = uint32(min(r.Uvarint(), limits.MaxDeliveries+1))
			}
			g.redeliver = append(g.redeliver, rd)
		}
		if version >= 4 {
			readGroupV4(r, g)
		}
		st.groups[k] = g
	}
	count := r.Count(maxCheckpointItems)
	for i := uint64(0); i < uint64(count) && r.Err() == nil; i++ {
		epoch := i + 1 // before version 3: a consumer's number plus one
		if version < 3 && r.Byte() == 0 {
			continue // reclaimed
		}
		if version >= 3 {
			epoch = r.Uvarint()
		}
		s, g, name := readNames(r)
		cs := &consumer{epoch: epoch, key: consumerKey{s, g, name}, ackPos: int64(r.Uvarint()), next: int64(r.Uvarint())}
		m := r.Count(r.Remaining())
		for i := 0; i < m && r.Err() == nil; i++ {
			p := pulled{consumeSeq: int64(r.Uvarint()), pos: int64(r.Uvarint()), acked: r.Byte() == 1, deliveries: 1}
			if version >= 4 {
				p.deliveries = uint32(min(r.Uvarint(), limits.MaxDeliveries+1))
				p.deadline = int64(r.Uvarint())
			}
			cs.window = append(cs.window, p)
		}
		if st.byKey[cs.key] != nil {
			return nil, fmt.Errorf("%w: consumer %v twice", ErrBadCheckpoint, cs.key)
		}
		st.consumers[epoch] = cs
		st.byKey[cs.key] = cs
	}
	if version < 3 {
		st.nextEpoch = uint64(count) + 1
	}
	for n := r.Count(maxCheckpointItems); n > 0 && r.Err() == nil; n-- {
		id := r.String(limits.MaxName)
		st.members[id] = r.String(limits.MaxAddr)
	}
	st.retainFrom = r.Int64()
	if version >= 2 {
		c.ends.journal = r.Int64()
		for n := r.Count(maxCheckpointItems); n > 0 && r.Err() == nil; n-- {
			h := int64(r.Uvarint())
			st.hours[h] = &hourState{pending: int64(r.Uvarint())}
			c.ends.hours[h] = delaywheel.HourEnds{Records: int64(r.Uvarint()), Dispatched: int64(r.Uvarint())}
		}
		for n := r.Count(maxCheckpointItems); n > 0 && r.Err() == nil; n-- {
			subject := r.String(limits.MaxName)
			st.delayed[subject] = int64(r.Uvarint())
		}
	}
	if version >= 3 {
		st.nextEpoch = r.Uvarint()
	}
	if version >= 4 {
		st.nextGen = r.Uvarint()
		st.retries = int64(r.Uvarint())
	}
	st.config.source = ConfigNode // its values are the node's (FSM.adoptNodeConfig)
	if version >= 5 {
		st.removing = r.Byte() == 1 // another byte fails the canonical check
		st.identity = r.String(maxIdentity)
		readConfig(r, &st.config)
		if err := readApps(r, st); err != nil {
			return nil, err
		}
		if version >= 6 {
			c.ends.timeline = r.Int64()
		}
		if version >= 7 {
			c.ends.consumeBytes = make(map[string]int64, len(subjects))
			for _, subject := range subjects {
				if r.Err() != nil {
					break
				}
				c.ends.consumeBytes[subject] = int64(min(r.Uvarint(), math.MaxInt64))
			}
		}
		if version >= 8 {
			st.version = qversion.Number(min(r.Uvarint(), math.MaxUint32))
		}
	} else {
		// Before version 5 an hour's delayed messages were not counted:
		// its pending and dispatched records (retries too) bound them.
		for h, hs := range st.hours {
			hs.delayed = derivedDelayed(hs.pending, c.ends.hours[h])
		}
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	st.derive()
	// The encoder writes each subject, group, consumer and member once, in
	// sorted order, and acked as 0 or 1: refuse anything else (a repeated
	// key would silently overwrite state), so a checkpoint has exactly one
	// encoding.
	if !bytes.Equal(c.encodeVersion(version), b) {
		return nil, fmt.Errorf("%w: non-canonical encoding (repeated or unsorted keys)", ErrBadCheckpoint)
	}
	// And a state has one: version 5 only for a state version 4 cannot
	// hold, which encode() writes so.
	if version == 5 && !c.needsVersion5() {
		return nil, fmt.Errorf("%w: version %d holding nothing version 4 cannot", ErrBadCheckpoint, version)
	}
	if version == 6 && c.ends.timeline == 0 {
		return nil, fmt.Errorf("%w: version %d holding no timeline", ErrBadCheckpoint, version)
	}
	if version == 7 && !c.ends.storesBytes() {
		return nil, fmt.Errorf("%w: version %d holding no stored bytes", ErrBadCheckpoint, version)
	}
	if version == 8 && st.version == 0 {
		return nil, fmt.Errorf("%w: version %d holding no active version", ErrBadCheckpoint, version)
	}
	return c, nil
}

// readConfig reads what version 5 adds: the broker group's configuration.
func readConfig(r *binenc.Reader, c *groupConfig) {
	if c.source = ConfigSource(r.Byte()); c.source == ConfigNode {
		return // the node's own values, no more
	}
	c.index = r.Uvarint()
	for _, set := range c.fields() {
		set(int64(min(r.Uvarint(), math.MaxInt64)))
	}
	c.dedupFloor = r.Int64()
}

// check refuses a checkpoint whose numbers contradict each other; a
// decoder must not hand the FSM state it would later trip over.
func (c *checkpoint) check() error {
	if err := c.st.config.check(c.st.applied, c.st.now); err != nil {
		return fmt.Errorf("%w: broker group configuration: %w", ErrBadCheckpoint, err)
	}
	if c.ends.messages < 0 || c.ends.pulls < 0 || c.dedupFrom < -1 || c.dedupFrom > c.ends.messages ||
		c.st.retainFrom < 0 || c.st.retainFrom > c.ends.messages {
		return fmt.Errorf("%w: negative or inconsistent log ends", ErrBadCheckpoint)
	}
	for s, end := range c.ends.consume {
		if CheckName("subject", s) != nil || end < 0 {
			return fmt.Errorf("%w: consume log %q ends at %d", ErrBadCheckpoint, s, end)
		}
	}
	if c.ends.timeline < 0 {
		return fmt.Errorf("%w: timeline ends at %d", ErrBadCheckpoint, c.ends.timeline)
	}
	if c.ends.journal < 0 || c.ends.journal%delaywheel.JournalRecordSize != 0 {
		return fmt.Errorf("%w: journal ends at %d", ErrBadCheckpoint, c.ends.journal)
	}
	var pending, delayed int64
	for h, hs := range c.st.hours {
		e := c.ends.hours[h]
		if !delaywheel.ValidHour(h) || hs.pending < 0 || e.Records < 0 || (hs.pending > 0 && e.Records == 0) ||
			e.Dispatched < 0 || e.Dispatched%delaywheel.DispatchRecordSize != 0 || pending+hs.pending < pending {
			return fmt.Errorf("%w: schedule hour %d: %d pending, ends %+v", ErrBadCheckpoint, h, hs.pending, e)
		}
		pending += hs.pending
	}
	for s, n := range c.st.delayed {
		if CheckName("subject", s) != nil || n <= 0 || delayed+n < delayed {
			return fmt.Errorf("%w: %d delayed messages of %q", ErrBadCheckpoint, n, s)
		}
		delayed += n
	}
	if c.st.identity != "" && CheckIdentity(c.st.identity) != nil {
		return fmt.Errorf("%w: group identity %q", ErrBadCheckpoint, c.st.identity)
	}
	if c.st.retries < 0 || pending != delayed+c.st.retries {
		return fmt.Errorf("%w: %d delayed messages by hour, %d by subject and %d retries", ErrBadCheckpoint, pending, delayed, c.st.retries)
	}
	var byApp int64
	for _, n := range c.st.appDelayed {
		if byApp += n; byApp > delayed {
			return fmt.Errorf("%w: more delayed messages by application than the %d pending", ErrBadCheckpoint, delayed)
		}
	}
	var retrying int64
	for k, g := range c.st.groups {
		if retrying += g.retrying; retrying > c.st.retries || retrying < 0 {
			return fmt.Errorf("%w: groups wait on more retries than the %d pending", ErrBadCheckpoint, c.st.retries)
		}
		if err := g.check(); err != nil {
			return fmt.Errorf("%w: group %s of %s: %w", ErrBadCheckpoint, k.group, k.subject, err)
		}
		if g.gen > c.st.nextGen {
			return fmt.Errorf("%w: group %s of %s: life %d, the last given is %d", ErrBadCheckpoint, k.group, k.subject, g.gen, c.st.nextGen)
		}
	}
	for _, cs := range c.st.consumers {
		if cs.ackPos < 0 || cs.next < cs.ackPos || cs.next-cs.ackPos != int64(len(cs.window)) {
			return fmt.Errorf("%w: consumer %v: ack position %d, next %d, window %d", ErrBadCheckpoint, cs.key, cs.ackPos, cs.next, len(cs.window))
		}
		if cs.epoch == 0 || cs.epoch >= c.st.nextEpoch {
			return fmt.Errorf("%w: consumer %v has epoch %d, the next is %d", ErrBadCheckpoint, cs.key, cs.epoch, c.st.nextEpoch)
		}
		for _, p := range cs.window {
			if p.deliveries < 1 || p.deliveries > limits.MaxDeliveries || p.deadline < 0 {
				return fmt.Errorf("%w: consumer %v: an entry delivered %d times, due back at %d", ErrBadCheckpoint, cs.key, p.deliveries, p.deadline)
			}
		}
		if c.st.groups[groupKey{cs.key.subject, cs.key.group}] == nil {
			return fmt.Errorf("%w: consumer %v of a group the checkpoint lacks", ErrBadCheckpoint, cs.key)
		}
	}
	return nil
}

// derive counts what the state keeps besides what a checkpoint holds: the
// consumers of each group and the groups of each subject, the dead letters,
// and each consumer's open entries and earliest deadline.
func (s *state) derive() {
	for _, cs := range s.consumers {
		s.groups[groupKey{cs.key.subject, cs.key.group}].consumers++
		if cs.app != "" {
			s.appConsumers[cs.app]++
		}
		for _, p := range cs.window {
			if !p.acked {
				cs.open++
			}
		}
		cs.setDeadlines()
	}
	for k, g := range s.groups {
		s.groupsOf[k.subject]++
		g.key, g.deadAt = k, -1
		s.recountDead(g, 0, false)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// readCheckpoint reads dir's checkpoint; a missing one is the empty state.
func readCheckpoint(dir string) (*checkpoint, error) {
	b, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return &checkpoint{st: newState(), ends: &logEnds{consume: map[string]int64{}, hours: map[int64]delaywheel.HourEnds{}}, dedupFrom: -1}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fsm: read checkpoint: %w", err)
	}
	c, err := decodeCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, checkpointFile), err)
	}
	return c, nil
}

// writeFileAtomic writes data to dir/name durably (disk.WriteFileAtomic).
func writeFileAtomic(dir, name string, data []byte) error {
	if err := disk.WriteFileAtomic(dir, name, data); err != nil {
		return fmt.Errorf("fsm: %w", err)
	}
	return nil
}

// DurableEnds is where a stopped state machine's logs were made durable:
// what its checkpoint records. Bytes past these ends were never promised
// durable (a crash may tear them), and opening cuts them off.
type DurableEnds struct {
	Messages int64
	// Schedule gives, by hour directory name (2026113014), where that
	// hour's records end.
	Schedule map[string]int64
}

// ReadDurableEnds reads the checkpoint of the state machine in dir (the
// Dir of its Config). Tools and tests use it; it must not run while the
// state machine is open.
func ReadDurableEnds(dir string) (DurableEnds, error) {
	c, err := readCheckpoint(filepath.Join(dir, dataDir))
	if err != nil {
		return DurableEnds{}, err
	}
	out := DurableEnds{Messages: c.ends.messages, Schedule: map[string]int64{}}
	for hour, e := range c.ends.hours {
		out.Schedule[delaywheel.HourName(hour)] = e.Records
	}
	return out, nil
}

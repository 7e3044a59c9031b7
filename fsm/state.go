package fsm

import (
	"cmp"
	"maps"
	"math"
	"slices"

	"github.com/qmqgo/qmq/internal/version"
)

// groupKey names a consumer group of a subject: every group gets every
// message of its subject.
type groupKey struct{ subject, group string }

// consumerKey names one consumer of a group.
type consumerKey struct{ subject, group, name string }

// group is the consumption state a group shares: where its cursor stands in
// the subject's consume log, the entries to hand out before the cursor moves
// on (reclaimed from consumers that went away, timed out, or due again after
// a retry), its dead letters, and its settings.
type group struct {
	cursor    int64        // next consume-log sequence to hand out
	redeliver []redelivery // to hand out first, in order
	settings  ConsumerGroupSettings
	// gen numbers the group's life since its creation or last reset: a
	// retry scheduled in an earlier life finds another number when it
	// fires and is dropped. Never reused (state.nextGen).
	gen      uint64
	retrying int64 // retries of this life scheduled and not yet fired
	dead     []deadLetter
	// lost counts messages retention removed before the group finished
	// them (not yet handed out, due again, or dead letters); deadDropped
	// counts dead letters dropped to keep within the limits.
	lost, deadDropped int64
	idleSince         int64 // when its last consumer went (or it was created)
	consumers         int   // registered consumers (derived, not checkpointed)
	// app is the application whose pull created the group ("" for none):
	// its dead letters count towards that application's share.
	app string
	// key is the group's key in state.groups, and deadAt its place in its
	// application's deadShare heap, -1 while it holds no dead letter
	// (both derived).
	key    groupKey
	deadAt int
}

// redelivery is an entry to hand out again, with how many times the group
// has handed it out so far.
type redelivery struct {
	seq        int64
	deliveries uint32
}

// deadLetter is a message the group gave up on after its most deliveries.
type deadLetter struct {
	seq        int64  // consume-log sequence
	deliveries uint32 // how many times it was handed out
	at         int64  // when it became a dead letter
}

// pulled is one entry of a consumer's unacked window.
type pulled struct {
	consumeSeq int64
	pos        int64 // where the pull log recorded it
	// done: acked, nacked or timed out; nothing more of this consumer
	// touches it.
	acked      bool
	deliveries uint32 // the group's deliveries of the message, this one included
	// deadline is when the ack timeout hands it to the group again; 0 for
	// none.
	deadline int64
}

// consumer is one registration of a consumer: from its first pull until
// Reclaim (or Forget) removes it. Pull sequences below ackPos are acked;
// window holds the entries of pull sequences ackPos .. next-1, so acks out
// of order are remembered until the ack position can pass them. Its epoch
// numbers the registration: never given twice, so an ack or a resend from
// an earlier life of the same name cannot touch this one's entries.
type consumer struct {
	epoch  uint64
	key    consumerKey
	app    string // the application that registered it ("" for none)
	ackPos int64
	next   int64
	window []pulled
	open   int // entries of window not done (derived)
	// nextDeadline is at or before the earliest deadline of the open
	// entries (noDeadline for none), and is that deadline unless ordered
	// was false when an entry with it was finished: the leader looks for
	// overdue entries only in consumers whose nextDeadline has passed.
	// Derived, like ordered and lastDeadline.
	nextDeadline int64
	// ordered says the deadlines of the open entries never decrease along
	// the window, so the first open one with a deadline has the earliest;
	// lastDeadline is at or after every open entry's deadline. They do
	// unless an entry is extended or the ack wait shortened.
	ordered      bool
	lastDeadline int64
}

// noDeadline is a consumer's nextDeadline when none of its entries has one.
const noDeadline = math.MaxInt64

// setDeadlines computes nextDeadline, ordered and lastDeadline from the
// window: nextDeadline is then exact.
func (c *consumer) setDeadlines() {
	c.nextDeadline, c.ordered, c.lastDeadline = noDeadline, true, 0
	for _, p := range c.window {
		if !p.acked && p.deadline != 0 {
			c.nextDeadline = min(c.nextDeadline, p.deadline)
			c.ordered = c.ordered && p.deadline >= c.lastDeadline
			c.lastDeadline = max(c.lastDeadline, p.deadline)
		}
	}
}

// addDeadline records that an open entry, the window's last if last, now
// has deadline d (it was handed out, or extended).
func (c *consumer) addDeadline(d int64, last bool) {
	c.nextDeadline = min(c.nextDeadline, d)
	c.ordered = c.ordered && last && d >= c.lastDeadline
	c.lastDeadline = max(c.lastDeadline, d)
}

// orderedScan bounds the window entries refreshDeadline looks at for the
// first open one with a deadline (those before it were handed out while
// the group had no ack wait).
const orderedScan = 8

// refreshDeadline brings nextDeadline up to the earliest deadline of the
// open entries where that is cheap, after entries were finished: none
// open, or deadlines in window order. Otherwise it stays a lower bound,
// and the Expire the leader proposes once it passes recomputes it.
func (c *consumer) refreshDeadline() {
	if c.open == 0 {
		c.nextDeadline, c.ordered, c.lastDeadline = noDeadline, true, 0
		return
	}
	if !c.ordered {
		return
	}
	for i := 0; i < len(c.window) && i < orderedScan; i++ {
		if p := c.window[i]; !p.acked && p.deadline != 0 {
			c.nextDeadline = p.deadline
			return
		}
	}
}

// unacked returns how many of the consumer's entries await an ack (or a
// nack, or their timeout).
func (c *consumer) unacked() int { return c.open }

// finish marks the window entry of pull sequence seq done, if it was not;
// it reports whether it was open.
func (c *consumer) finish(seq int64) (pulled, bool) {
	p := &c.window[seq-c.ackPos]
	if p.acked {
		return *p, false
	}
	p.acked = true
	c.open--
	return *p, true
}

// advance moves the ack position over the contiguous acked head of the
// window, after entries were finished, and brings the deadline bound up to
// date where that is cheap.
func (c *consumer) advance() {
	n := 0
	for n < len(c.window) && c.window[n].acked {
		n++
	}
	c.window = c.window[n:]
	c.ackPos += int64(n)
	c.refreshDeadline()
}

// state is everything the FSM holds besides its logs.
type state struct {
	applied   uint64 // last applied Raft index
	now       int64  // newest leader-stamped time applied (never goes back)
	groups    map[groupKey]*group
	consumers map[uint64]*consumer // by epoch
	byKey     map[consumerKey]*consumer
	nextEpoch uint64            // the epoch the next registration gets
	nextGen   uint64            // the last group life number given
	members   map[string]string // node id → client address
	// retainFrom is where retention last decided the message log starts.
	// The checkpoint records it before any file is deleted, so a removal
	// that a crash interrupted is finished on open.
	retainFrom int64
	// removing: the state is that of retention's checkpoint, taken before
	// its removal of everything before retainFrom and the adjustments that
	// follow it (removeBefore); cleared once they are made. A node that
	// stops in between makes them again on open, on this same state.
	removing bool
	// identity names the group's Raft history (see identity.go); "" until
	// an entry records it.
	identity string
	// hours holds, per hour of delivery time, the delayed messages not yet
	// fired; delayed counts them per subject, appDelayed per application
	// that sent them (those sent by none are not counted there).
	hours      map[int64]*hourState
	delayed    map[string]int64
	appDelayed map[string]int64
	// retries counts retry records pending in the schedule, of every
	// group and life; deadTotal counts the dead letters of every group,
	// and deadShares per application (derived, see deadshare.go).
	retries, deadTotal int64
	deadShares         map[string]*deadShare
	// appConsumers counts the consumers each application registered
	// (derived).
	appConsumers map[string]int64
	// groupsOf counts each subject's consumer groups (derived).
	groupsOf map[string]int
	// config is the broker group's configuration, which apply goes by.
	config groupConfig
	// version is the group's active version Number (SetVersion), 0 until
	// an entry records one: a group formed before version gates, at V1.
	version version.Number
}

// hourState is one hour of the schedule log.
type hourState struct {
	pending int64
	// delayed counts the delayed messages appended to the hour, pending or
	// fired (not retries, which the unacked windows bound), and apps each
	// application's of them: an hour and an application's share of it are
	// bounded by them (checkSchedule). Since version 5 of the checkpoint;
	// an hour of an earlier checkpoint counts its pending and dispatched
	// records, retries included, as an upper bound.
	delayed int64
	apps    map[string]int64
	// fired holds the offsets of the hour's records already fired. It is
	// rebuilt from the hour's dispatch log the first time a Fire needs it
	// after a restart (nil until then).
	fired map[int64]struct{}
}

func newState() *state {
	return &state{groups: map[groupKey]*group{}, consumers: map[uint64]*consumer{}, byKey: map[consumerKey]*consumer{},
		nextEpoch: 1, members: map[string]string{}, hours: map[int64]*hourState{}, delayed: map[string]int64{},
		groupsOf: map[string]int{}, appDelayed: map[string]int64{}, deadShares: map[string]*deadShare{}, appConsumers: map[string]int64{},
		config: nodeGroupConfig()}
}

// untally takes one from key's tally, dropping the key at zero.
func untally[K comparable](tally map[K]int64, key K) {
	if tally[key]--; tally[key] <= 0 {
		delete(tally, key)
	}
}

// stamp advances the state's clock to a command's leader-stamped time. A new
// leader's clock may be behind the old one's; time in the state machine
// never goes back.
func (s *state) stamp(now int64) int64 {
	s.now = max(s.now, now)
	return s.now
}

// addGroup records a new consumer group.
func (s *state) addGroup(k groupKey, g *group) {
	g.key, g.deadAt = k, -1
	s.groups[k] = g
	s.groupsOf[k.subject]++
}

// removeGroup forgets a consumer group (its consumers must be gone).
func (s *state) removeGroup(k groupKey) {
	g := s.groups[k]
	s.recountDead(g, len(g.dead), true)
	delete(s.groups, k)
	if s.groupsOf[k.subject]--; s.groupsOf[k.subject] <= 0 {
		delete(s.groupsOf, k.subject)
	}
}

// takeEpoch returns the next consumer epoch: never given twice, and given
// in apply order, so every replica gives the same.
func (s *state) takeEpoch() uint64 {
	n := s.nextEpoch
	s.nextEpoch++
	return n
}

// takeGen returns the next group life number (see group.gen).
func (s *state) takeGen() uint64 {
	s.nextGen++
	return s.nextGen
}

// register records a new consumer of an existing group under the next
// epoch.
func (s *state) register(key consumerKey, app string) *consumer {
	c := &consumer{epoch: s.takeEpoch(), key: key, app: app, nextDeadline: noDeadline, ordered: true}
	s.consumers[c.epoch] = c
	s.byKey[key] = c
	s.groups[groupKey{key.subject, key.group}].consumers++
	if app != "" {
		s.appConsumers[app]++
	}
	return c
}

// forget removes a consumer; its epoch is never given again.
func (s *state) forget(c *consumer) {
	delete(s.byKey, c.key)
	delete(s.consumers, c.epoch)
	if c.app != "" {
		untally(s.appConsumers, c.app)
	}
	if g := s.groups[groupKey{c.key.subject, c.key.group}]; g != nil {
		if g.consumers--; g.consumers == 0 {
			g.idleSince = s.now
		}
	}
}

// sortedConsumers returns the consumers in epoch order (the order they
// registered), for encodings and answers that must not depend on map order.
func (s *state) sortedConsumers() []*consumer {
	out := make([]*consumer, 0, len(s.consumers))
	for _, epoch := range slices.Sorted(maps.Keys(s.consumers)) {
		out = append(out, s.consumers[epoch])
	}
	return out
}

// sortedGroups returns the groups in (subject, group) order, for encodings
// that must not depend on map order.
func (s *state) sortedGroups() []groupKey {
	keys := make([]groupKey, 0, len(s.groups))
	for k := range s.groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.subject, b.subject), cmp.Compare(a.group, b.group))
	})
	return keys
}

// recordsApps reports whether any group, consumer or delayed message is
// recorded as an application's (what checkpoint version 5 adds to hold).
func (s *state) recordsApps() bool {
	if len(s.appDelayed) > 0 || len(s.appConsumers) > 0 {
		return true
	}
	for _, hs := range s.hours {
		if len(hs.apps) > 0 {
			return true
		}
	}
	for _, g := range s.groups {
		if g.app != "" {
			return true
		}
	}
	return false
}

package fsm

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/test/testmsg"
)

// FuzzApplyAtLimits drives two replicas with the same commands, built from
// the fuzzer's bytes out of values at, just under and just over every limit
// a command meets (message size, names, counts, delivery times, pull sizes,
// ack ranges, addresses, the broker group configuration's bounds), and
// mutated command bytes. The replicas are opened with different values of
// their own for every setting of the broker group configuration, which
// apply must not go by once the group is seeded: the first entry is the
// seed, of one node's values, as a new group's first leader proposes it
// before anything else that depends on the configuration. No replica may panic, both must answer every entry
// alike, their state and logs must stay byte-identical, and every
// consumer's deadline bound must stay at or before its open entries'
// deadlines. The seeds reach every limit; `make fuzz` explores more.
func FuzzApplyAtLimits(f *testing.F) {
	// Each step is four bytes: a kind of command and three picks from the
	// tables of limitEntries.
	for _, seed := range [][]byte{
		{ // message sizes: at the limit (delayed), one under, fired hours later; one over; a frame's worth, delayed
			0, 2, 0, 1, 0, 1, 0, 0, 6, 1, 0, 0, 2, 0, 0, 2, 4, 1, 1, 0, 0, 3, 0, 0, 1, 4, 0, 1,
		},
		{ // delivery times at and past the last hour; names at 200 and 201 bytes, empty and bad; addresses at and over 256; pull sizes
			0, 0, 1, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 4, 6, 0, 0, 3, 0, 7, 1, 0, 0, 7, 2, 1, 0, 3, 1, 1, 4, 2, 0, 2, 5, 2, 0, 0, 3, 6, 2, 0, 0,
		},
		{ // counts at and over their limits, cut and changed bytes, a reclaim, a jump in time
			8, 0, 0, 0, 8, 1, 0, 0, 6, 0, 1, 0, 2, 0, 0, 1, 4, 0, 2, 0, 4, 3, 3, 0, 9, 5, 0, 0, 10, 5, 7, 0, 5, 0, 0, 0, 11, 3, 0, 0,
		},
		{ // settings at and over their bounds, pulls with tags and start positions, nacks (retry times at and over the largest delay), fires of the retries, extends, expires
			15, 0, 0, 0, 0, 0, 0, 0, 18, 0, 1, 1, 18, 1, 2, 2, 12, 0, 0, 0, 12, 1, 1, 3, 12, 2, 2, 4, 15, 1, 2, 3, 6, 1, 0, 0, 13, 1, 1, 0, 14, 2, 2, 0, 15, 4, 5, 6,
		},
		{ // pulls bounded in bytes (one byte, under a message, a largest message) of small and largest messages, one going alone; a resend; a nack and an expire due at once; tag-filtered pulls passing the redeliveries over; unfiltered ones taking what fits
			0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 36, 2, 3, 0, 30, 2, 2, 0, 36, 2, 2, 0, 36, 2, 12, 1, 0, 0, 18, 1, 0, 0, 14, 3, 1, 2, 18, 1, 0, 0, 2, 0, 30, 2, 2, 0, 24, 2,
		},
		{ // a nack whose retry falls past the last hour a schedule reference can name
			0, 0, 0, 0, 2, 0, 0, 1, 12, 4, 0, 0, 2, 0, 0, 1,
		},
		{ // dead letters at max deliveries, resent and purged, seqs at and over their limit; resets; idle forgets; a nack in the last schedulable hour
			15, 6, 0, 0, 0, 0, 0, 0, 2, 0, 0, 3, 12, 3, 1, 0, 17, 1, 1, 0, 17, 2, 2, 1, 17, 1, 3, 2, 16, 0, 1, 0, 16, 3, 2, 0, 19, 0, 1, 0, 19, 1, 2, 0, 2, 0, 0, 3, 12, 4, 0, 0,
		},
		{ // broker group configurations at, under and over their bounds, seeds and changes, between appends, pulls and a time jump
			0, 0, 0, 0, 20, 0, 0, 1, 0, 1, 0, 0, 2, 0, 0, 1, 20, 1, 1, 0, 20, 2, 2, 0, 0, 0, 0, 0, 20, 3, 3, 0, 20, 4, 4, 1, 11, 1, 0, 0, 20, 5, 5, 0, 2, 0, 0, 2,
		},
		{ // every bound of the configuration, under and over, then at its limits
			20, 6, 0, 0, 20, 7, 0, 0, 20, 8, 0, 0, 20, 9, 0, 0, 20, 10, 0, 0, 20, 11, 0, 0, 20, 12, 0, 0, 20, 13, 0, 0, 20, 14, 0, 0, 20, 15, 0, 0, 20, 16, 0, 0, 20, 2, 6, 1,
		},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, recipe []byte) {
		cfgs := nodeConfigs(t.TempDir(), t.TempDir())
		entries := []*raft.Log{seedEntry(1, cfgs[1].BrokerConfig())}
		for _, e := range limitEntries(recipe) {
			e.Index++ // after the seed
			entries = append(entries, e)
		}
		fs := openReplicas(t, cfgs)
		a, b := fs[0], fs[1]
		for _, e := range entries {
			ra, rb := describe(a.Apply(e)), describe(b.Apply(e))
			if ra != rb {
				t.Fatalf("entry %d: replicas answered\n%s\n%s", e.Index, ra, rb)
			}
			wantDeadlineBounds(t, a)
		}
		if sa, sb := stateBytes(a), stateBytes(b); !bytes.Equal(sa, sb) {
			t.Fatal("replicas hold different state")
		}
		wantSameFiles(t, a.cfg.Dir, b.cfg.Dir)
		wantSameReads(t, a, b)
	})
}

// limitEntries turns a recipe into Raft entries, at most 12, one command
// each: every four bytes are a step, a kind of command and three picks of
// values from the tables below.
func limitEntries(recipe []byte) []*raft.Log {
	const now = 1_800_000_000_000
	pick := func(i int, n int) int {
		if i < len(recipe) {
			return int(recipe[i]) % n
		}
		return 0
	}
	sizes := []int{100, limits.MaxMessage - 1, limits.MaxMessage, limits.MaxMessage + 1, limits.MaxFrame - 8}
	// name(k, usual): the usual name, or one at or over the limit, or bad.
	odd := []string{strings.Repeat("n", limits.MaxName), strings.Repeat("n", limits.MaxName+1), "", "bad/name", "-x"}
	name := func(k int, usual string) string {
		if k%6 == 0 {
			return usual
		}
		return odd[k%6-1]
	}
	lastHour := (int64(1)<<20 - 1) * delaywheel.HourMillis
	delays := []int64{0, now + 1000, now - 1000, lastHour, lastHour + delaywheel.HourMillis - 1, lastHour + delaywheel.HourMillis, 1 << 62}
	counts := []int{0, 1, 1000, limits.MaxPullMessages, limits.MaxPullMessages + 1, -1}
	pullBytes := []int64{0, 1, 150, limits.MaxMessage, limits.MaxMessage + 8, math.MaxInt64, 8 << 20}
	var out []*raft.Log
	var refs []uint64
	for i, step := 0, 0; i < len(recipe) && step < 12; i, step = i+4, step+1 {
		index := uint64(step + 1)
		at := int64(now + step*1000)
		var data []byte
		switch recipe[i] % 21 {
		case 0, 1: // an append: a message of a size from the table, maybe delayed, and a small one maybe badly named
			m := testmsg.OfSize(fmt.Sprint("m", step), "s", delays[pick(i+3, len(delays))], sizes[pick(i+1, len(sizes))])
			small := unitMsg(fmt.Sprint("s", step), name(pick(i+2, 6), "s"), 3)
			c := &Append{Now: at, Messages: []*message.Message{m, small}}
			if recipe[i]%2 == 1 { // sent by applications: a code at its limit and a bad one, limits of 0, 1 and the most
				c.Apps = []Sender{{App: name(pick(i+2, 6), "app"), MaxDelayed: []int64{0, 1, limits.MaxDelayed}[pick(i+1, 3)]}}
				c.Senders = []int{1, pick(i+3, 2)}
			}
			data = c.Encode()
			if m.DeliverAt > at { // what a Fire may name later
				refs = append(refs, delaywheel.MakeRef(delaywheel.Hour(m.DeliverAt), 0), delaywheel.MakeRef(delaywheel.Hour(m.DeliverAt), delaywheel.RecordSize(m)))
			}
		case 2, 3: // a pull, maybe asking for a resend, bounded in bytes under, at and over a message, or not at all; maybe an application's, at its limit of consumers
			c := &Pull{Start: StartEarliest, Now: at, Subject: name(pick(i+1, 6), "s"), ConsumerGroup: name(pick(i+2, 6), "g"), Consumer: "c",
				Max: counts[pick(i+3, len(counts))], Resend: recipe[i]%2 == 1, From: int64(pick(i+3, 3)) - 1, Epoch: uint64(pick(i+1, 3)),
				MaxBytes: pullBytes[pick(i+2, len(pullBytes))]}
			if pick(i+1, 3) == 0 {
				c.App, c.MaxConsumers = name(pick(i+3, 6), "app"), []int{0, 1, limits.MaxConsumers}[pick(i+2, 3)]
			}
			data = c.Encode()
		case 4: // an ack of ranges near what was pulled, as many as a command may hold and one more
			ranges := []message.AckRange{{First: 0, Last: 0}, {First: 0, Last: int64(pick(i+1, 4))}, {First: -1, Last: 3}, {First: 5, Last: 2}}
			n := []int{1, 2, limits.MaxAckRanges, limits.MaxAckRanges + 1}[pick(i+2, 4)]
			c := &Ack{Now: at, Subject: name(pick(i+3, 6), "s"), ConsumerGroup: "g", Consumer: "c", Epoch: uint64(pick(i+1, 3))}
			for k := range n {
				c.Ranges = append(c.Ranges, ranges[k%len(ranges)])
			}
			data = c.Encode()
		case 5: // a reclaim of an epoch, or the group forgotten
			data = (&Reclaim{Now: at, Subject: name(pick(i+1, 6), "s"), ConsumerGroup: "g", Consumer: "c", Epoch: uint64(pick(i+3, 3))}).Encode()
			if pick(i+2, 2) == 1 {
				data = (&Forget{Now: at, Subject: name(pick(i+1, 6), "s"), ConsumerGroup: name(pick(i+3, 6), "g")}).Encode()
			}
		case 6: // a fire, hours later, of what was scheduled and of bogus references, or of too many
			c := &Fire{Now: at + int64(pick(i+1, 3))*delaywheel.HourMillis, Refs: append([]uint64{1 << 63, 0}, refs...)}
			if pick(i+2, 2) == 1 {
				for len(c.Refs) <= limits.MaxFireRefs {
					c.Refs = append(c.Refs, uint64(len(c.Refs)))
				}
			}
			data = c.Encode()
		case 7: // a member, its address at and over its limit
			data = (&SetMember{Now: at, ID: name(pick(i+1, 6), "n1"), ClientAddr: strings.Repeat("a", limits.MaxAddr+pick(i+2, 2))}).Encode()
		case 8: // an append of as many messages as a command may hold, or one more
			msgs := make([]*message.Message, limits.MaxBatchMessages+pick(i+1, 2))
			for k := range msgs {
				msgs[k] = unitMsg(fmt.Sprint("b", step, "-", k), "s", 0)
			}
			data = (&Append{Now: at, Messages: msgs}).Encode()
		case 9, 10: // a valid command's bytes, cut short or with one byte changed
			data = (&Pull{Start: StartEarliest, Now: at, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 3}).Encode()
			if pos := pick(i+1, len(data)); recipe[i]%2 == 1 {
				data = data[:pos]
			} else {
				data[max(pos, 2)] ^= byte(pick(i+2, 255) + 1) // type and version stay known
			}
		case 11: // a leader time days ahead: expiry, sweeps and retention must agree
			data = (&Append{Now: at + int64(pick(i+1, 4))*24*delaywheel.HourMillis, Messages: []*message.Message{unitMsg(fmt.Sprint("t", step), "s", 1)}}).Encode()
		case 20: // a broker group configuration, seeded or set, at, under and over its bounds
			data = configLimitCommand(at, pick, i)
		default:
			data = consumeLimitCommand(recipe[i]%21, at, lastHour, pick, i, name)
		}
		out = append(out, &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data})
	}
	return out
}

// consumeLimitCommand returns the bytes of a consumer command (kinds 12 to
// 19 of limitEntries) with values at, just under and just over its limits.
func consumeLimitCommand(kind byte, at, lastHour int64, pick func(i, n int) int, i int, name func(k int, usual string) string) []byte {
	ranges := func() []message.AckRange {
		base := []message.AckRange{{First: 0, Last: 0}, {First: 0, Last: int64(pick(i+1, 4))}, {First: -1, Last: 3}, {First: 5, Last: 2}}
		n := []int{1, 2, limits.MaxAckRanges, limits.MaxAckRanges + 1}[pick(i+2, 4)]
		out := make([]message.AckRange, n)
		for k := range out {
			out[k] = base[k%len(base)]
		}
		return out
	}
	switch kind {
	case 12: // a nack: retry times none, passed, at and over the largest delay, negative; or its leader time in the last hour a retry can be scheduled in
		retry := []int64{0, at - 1, at + 1000, at + maxRetryDelay, at + maxRetryDelay + 1, -1}
		c := &Nack{Now: at, Subject: "s", ConsumerGroup: name(pick(i+3, 6), "g"), Consumer: "c", RetryAt: retry[pick(i+1, len(retry))], Ranges: ranges()}
		if pick(i+1, 6) == 4 {
			c.Now, c.RetryAt = lastHour+delaywheel.HourMillis-1000, 0
		}
		return c.Encode()
	case 13: // an extend
		return (&Extend{Now: at, Subject: "s", ConsumerGroup: "g", Consumer: name(pick(i+3, 6), "c"), Epoch: uint64(pick(i+1, 3)), Ranges: ranges()}).Encode()
	case 14: // an expire, up to a minute after the ack wait of the default settings
		return (&Expire{Now: at + int64(pick(i+3, 3))*30_000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: ranges()}).Encode()
	case 15: // settings at, under and over their bounds
		table := []ConsumerGroupSettings{
			DefaultConsumerGroupSettings(),
			{MaxDeliveries: 1, AckWait: minAckWait, IdleExpiry: minIdleExpiry},
			{MaxDeliveries: limits.MaxDeliveries, RetryFirst: maxRetryDelay, RetryMax: maxRetryDelay, AckWait: maxAckWait, MaxInFlight: limits.MaxInFlight, IdleExpiry: maxIdleExpiry},
			{MaxDeliveries: limits.MaxDeliveries + 1, RetryMax: maxRetryDelay + 1, AckWait: maxAckWait + 1, MaxInFlight: limits.MaxInFlight + 1, IdleExpiry: maxIdleExpiry + 1},
			{MaxDeliveries: 0, RetryFirst: 2, RetryMax: 1, AckWait: minAckWait - 1, IdleExpiry: minIdleExpiry - 1},
			{MaxDeliveries: 2, AckWait: minAckWait, MaxInFlight: 1},
			{MaxDeliveries: 1, AckWait: 0},
		}
		set := []SettingBits{setAll, SetMaxDeliveries | SetAckWait, SetMaxInFlight, setAll + 1, 0, SetRetryFirst | SetRetryMax, SetIdleExpiry}[pick(i+2, 7)]
		return (&SetConsumerGroup{Now: at, Subject: name(pick(i+3, 6), "s"), ConsumerGroup: "g", Set: set, Settings: table[pick(i+1, len(table))],
			Start: StartPosition(pick(i+3, 4)), StartAt: []int64{0, at, -1}[pick(i+2, 3)]}).Encode()
	case 16: // a reset to each position, a time before the epoch, and one unknown
		return (&ResetConsumerGroup{Now: at, Subject: "s", ConsumerGroup: name(pick(i+3, 6), "g"), To: StartPosition(pick(i+1, 4)), At: []int64{0, at, -1}[pick(i+2, 3)]}).Encode()
	case 17: // dead letters resent or purged: all, some, as many as a command may name and one more, or a bad operation or sequence
		c := &DeadLetters{Now: at, Subject: "s", ConsumerGroup: "g", Op: DeadLetterOp(pick(i+1, 4)), All: pick(i+3, 2) == 1}
		n := []int{0, 1, MaxDeadLetterSeqs, MaxDeadLetterSeqs + 1}[pick(i+2, 4)]
		for k := range n {
			c.Seqs = append(c.Seqs, []int64{0, 1, 5, -1}[k%4])
		}
		return c.Encode()
	case 18: // a version 3 or 4 pull: tags at and over their limits, at most once, each start position, idle expiry at and past its bounds, bytes
		tagSets := [][]string{nil, {"t1"}, make([]string, message.MaxTags), make([]string, message.MaxTags+1), {strings.Repeat("t", message.MaxTagLen)}, {strings.Repeat("t", message.MaxTagLen+1)}, {""}}
		tags := tagSets[pick(i+1, len(tagSets))]
		for k := range tags {
			if tags[k] == "" && len(tags) > 1 {
				tags[k] = fmt.Sprint("t", k)
			}
		}
		idle := []int64{0, minIdleExpiry - 1, minIdleExpiry, maxIdleExpiry, maxIdleExpiry + 1}
		c := &Pull{Now: at, Subject: "s", ConsumerGroup: name(pick(i+3, 6), "g"), Consumer: "c", Max: []int{1, 3, limits.MaxPullMessages}[pick(i+2, 3)],
			AtMostOnce: pick(i+2, 2) == 1, Tags: tags, TagsAll: pick(i+3, 2) == 1, Start: StartPosition(pick(i+1, 4)),
			StartAt: []int64{0, at - 1000, -1}[pick(i+2, 3)], IdleExpiry: idle[pick(i+3, len(idle))]}
		if v := pick(i+1, 3); v == 0 {
			c.version = commandVersionPull3
		} else {
			c.MaxBytes = []int64{1, limits.MaxMessage}[v-1]
		}
		return c.Encode()
	default: // a forget of a group idle that long, or a negative time
		return (&Forget{Now: at, Subject: "s", ConsumerGroup: name(pick(i+2, 6), "g"), IdleFor: []int64{0, 1, 1000, -1}[pick(i+1, 4)]}).Encode()
	}
}

// configLimitCommand returns the bytes of a SetBrokerConfig (kind 20 of
// limitEntries): a configuration at its bounds, or one setting under or
// over its bound, seeded or set, naming every setting or one.
func configLimitCommand(at int64, pick func(i, n int) int, i int) []byte {
	low := BrokerConfig{DedupWindow: 0, MaxPull: 1, MaxUnacked: 1, SegmentSize: limits.MinSegmentSize, IndexSegmentSize: limits.MinIndexSegmentSize}
	high := BrokerConfig{RetentionAge: maxRetentionAge, RetentionBytes: limits.MaxRetentionBytes, DedupWindow: maxDedupWindow,
		MaxPull: limits.MaxMaxPull, MaxUnacked: limits.MaxMaxUnacked, SegmentSize: limits.MaxSegmentSize, IndexSegmentSize: limits.MaxIndexSegmentSize}
	edge := func(c BrokerConfig, f func(*BrokerConfig)) BrokerConfig { f(&c); return c }
	table := []BrokerConfig{
		DefaultBrokerConfig(),
		low,
		high,
		edge(DefaultBrokerConfig(), func(c *BrokerConfig) { c.RetentionAge, c.RetentionBytes = c.DedupWindow, c.SegmentSize }),
		edge(low, func(c *BrokerConfig) { c.RetentionBytes, c.DedupWindow = c.SegmentSize, 1 }),
		edge(DefaultBrokerConfig(), func(c *BrokerConfig) { c.SegmentSize, c.IndexSegmentSize, c.MaxPull = 2<<20, 128<<10, 3 }),
		edge(low, func(c *BrokerConfig) { c.SegmentSize-- }),
		edge(high, func(c *BrokerConfig) { c.SegmentSize++ }),
		edge(low, func(c *BrokerConfig) { c.IndexSegmentSize-- }),
		edge(high, func(c *BrokerConfig) { c.IndexSegmentSize++ }),
		edge(high, func(c *BrokerConfig) { c.DedupWindow++ }),
		edge(low, func(c *BrokerConfig) { c.MaxPull-- }),
		edge(high, func(c *BrokerConfig) { c.MaxPull++ }),
		edge(low, func(c *BrokerConfig) { c.MaxUnacked-- }),
		edge(high, func(c *BrokerConfig) { c.MaxUnacked++; c.RetentionAge++ }),
		edge(DefaultBrokerConfig(), func(c *BrokerConfig) { c.RetentionAge = c.DedupWindow - 1 }),
		edge(DefaultBrokerConfig(), func(c *BrokerConfig) { c.RetentionBytes = c.SegmentSize - 1 }),
	}
	set := []ConfigBits{SetAllConfig, SetDedupWindow | SetRetentionAge, SetSegmentSize | SetIndexSegmentSize | SetRetentionBytes,
		SetMaxPull | SetMaxUnacked, SetAllConfig + 1, 0}[pick(i+2, 6)]
	return (&SetBrokerConfig{Now: at, Set: set, Seed: pick(i+3, 2) == 1, Config: table[pick(i+1, len(table))]}).Encode()
}

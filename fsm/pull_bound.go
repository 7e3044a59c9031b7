package fsm

import "github.com/qmqgo/qmq/logs"

// pullBound is what a pull may still hand out in bytes: the record sizes
// of the messages handed out add up to at most max. When not even the
// first fits, the pull hands out nothing and says how many bytes it needs
// (PullResult.Need): the leader waits for that much memory and pulls
// again, so a message is never handed out (consumed, at most once; its ack
// wait started, at least once) before its reply has room. Entries that
// cost no bytes (their message is gone) always fit, unless an entry
// already did not.
type pullBound struct {
	max  int64 // 0: no bound
	used int64
	full bool  // an entry did not fit: the pull hands out nothing more
	need int64 // the size of the first entry, when it did not fit
}

// bounded reports whether the pull is bounded in bytes: only then does it
// read the consume-log entries it hands out.
func (b *pullBound) bounded() bool { return b.max > 0 }

// take counts a message of size bytes if it fits, and reports whether it
// did.
func (b *pullBound) take(size int) bool {
	if b.full {
		return false
	}
	if b.max > 0 && b.used+int64(size) > b.max {
		b.full = true
		if b.used == 0 {
			b.need = int64(size)
		}
		return false
	}
	b.used += int64(size)
	return true
}

// result sets what res needs, if it hands out nothing for want of bytes.
func (b *pullBound) result(res *PullResult) *PullResult {
	if len(res.Entries) == 0 {
		res.Need = b.need
	}
	return res
}

// maxReadRun bounds the consume-log entries a pull reads at once (40 B
// each).
const maxReadRun = 1024

// consumeReader reads a consume log's entries in increasing sequence, a
// run at a time: a pull reads the entries at its group's cursor with one
// read rather than one a sequence.
type consumeReader struct {
	f   *FSM
	cl  *logs.ConsumeLog
	run []logs.ConsumeEntry
	at  int64 // the sequence of run[0]
}

// entry returns the entry of sequence seq, reading, if it does not hold
// it, the run from seq up to limit (exclusive; at most maxReadRun).
func (r *consumeReader) entry(seq, limit int64) logs.ConsumeEntry {
	if i := seq - r.at; i >= 0 && i < int64(len(r.run)) {
		return r.run[i]
	}
	n := int(min(max(limit-seq, 1), maxReadRun))
	r.f.flushConsume(r.cl, seq+int64(n))
	r.run, r.at = must(r.cl.GetRange(seq, n)), seq
	return r.run[0]
}

// consumeEntry returns the entry of sequence seq of cl.
func (f *FSM) consumeEntry(cl *logs.ConsumeLog, seq int64) logs.ConsumeEntry {
	f.flushConsume(cl, seq+1)
	return must(cl.Get(seq))
}

// flushConsume makes cl's entries up to sequence end readable, if this
// batch appended some of them: the logs are flushed, the message log
// first (a reader that finds an entry must find its message).
func (f *FSM) flushConsume(cl *logs.ConsumeLog, end int64) {
	if end > cl.EndSeq() {
		must(0, f.store.messages.Log().Flush())
		must(0, cl.Log().Flush())
	}
}

// PullBytes returns about how many bytes of messages pull c would hand out
// now, at most limit: the record sizes of the entries it would reach (those
// it would resend, the redelivery queue, then the cursor), up to c.Max of
// them. The leader takes that much memory for the reply before proposing
// c with it as MaxBytes, rather than the whole of limit for every pull. It
// answers limit when it cannot tell (a new group, a tag filter), and may
// be off either way by what applies meanwhile: too little costs entries
// this pull (they come with the next), too much holds memory until the
// pull is applied. Safe on any goroutine.
func (f *FSM) PullBytes(c *Pull, limit int64) int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return 0
	}
	cl := f.store.consumeLog(c.Subject)
	if cl == nil {
		return 0
	}
	seqs, cursor, rest, known := f.pullReach(c)
	if !known {
		return limit
	}
	var sum int64
	for _, seq := range seqs {
		if e, err := cl.Get(seq); err == nil {
			sum += int64(e.Size)
		}
	}
	for end := cl.EndSeq(); rest > 0 && cursor < end && sum < limit; {
		n := int(min(int64(rest), end-cursor, maxReadRun))
		es, err := cl.GetRange(cursor, n)
		if err != nil {
			return limit
		}
		for _, e := range es {
			sum += int64(e.Size)
		}
		cursor, rest = cursor+int64(n), rest-n
	}
	return min(sum, limit)
}

// pullReach returns what pull c would reach now, without a tag filter: the
// consume-log sequences it would resend or redeliver, then the cursor and
// how many more it would take from there; false if the group is unknown or
// c filters by tags.
func (f *FSM) pullReach(c *Pull) (seqs []int64, cursor int64, rest int, known bool) {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	g := f.st.groups[groupKey{c.Subject, c.ConsumerGroup}]
	if g == nil || len(c.Tags) > 0 {
		return nil, 0, 0, false
	}
	n := min(c.Max, f.st.config.MaxPull)
	if cs := f.st.byKey[consumerKey{c.Subject, c.ConsumerGroup, c.Consumer}]; cs != nil && c.Resend {
		from := c.From
		if c.Epoch != 0 && c.Epoch != cs.epoch {
			from = 0
		}
		for i := int(max(from-cs.ackPos, 0)); from >= 0 && i < len(cs.window) && len(seqs) < n; i++ {
			if !cs.window[i].acked {
				seqs = append(seqs, cs.window[i].consumeSeq)
			}
		}
	}
	for _, r := range g.redeliver {
		if len(seqs) >= n {
			break
		}
		seqs = append(seqs, r.seq)
	}
	return seqs, g.cursor, n - len(seqs), true
}

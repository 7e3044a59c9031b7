package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// queryMsg returns a small message of subject with tags and, unless key
// is "", the key property.
func queryMsg(id, subject, key string, tags ...string) *message.Message {
	m := unitMsg(id, subject, 16)
	m.Tags = tags
	if key != "" {
		m.Properties = []message.Property{{Key: message.KeyProperty, Value: key}}
	}
	return m
}

// mustQuery runs q and fails the test on an error.
func mustQuery(tb testing.TB, f *FSM, q MessageQuery) *MessageQueryResult {
	tb.Helper()
	res, err := f.QueryMessages(q)
	if err != nil {
		tb.Fatalf("QueryMessages(%+v): %v", q, err)
	}
	return res
}

// resultSeqs returns the sequences of a result's messages, checking that
// each message is the one its sequence names (id "m<seq>").
func resultSeqs(tb testing.TB, res *MessageQueryResult) []int64 {
	tb.Helper()
	out := []int64{}
	for _, sm := range res.Messages {
		if want := fmt.Sprint("m", sm.Seq); sm.Message == nil || sm.Message.ID != want {
			tb.Fatalf("sequence %d holds %+v, want id %s", sm.Seq, sm.Message, want)
		}
		out = append(out, sm.Seq)
	}
	return out
}

// appendTimed appends one message "m<i>" of subject "s" per time, each in
// its own entry stamped at that time, and returns the next index.
func appendTimed(tb testing.TB, f *FSM, idx uint64, times ...int64) uint64 {
	tb.Helper()
	for i, at := range times {
		idx++
		r := appendAt(tb, f, idx, at, queryMsg(fmt.Sprint("m", i), "s", ""))
		if r.Messages[0].Status != Appended || r.Messages[0].Seq != int64(i) {
			tb.Fatalf("append %d: %+v", i, r.Messages[0])
		}
	}
	return idx
}

func TestQueryTimeWindow(t *testing.T) {
	f := unitFSM(t)
	// Sequences 0..9 appended at 1000, 1000, 2000, 2000, ..., 5000, 5000.
	var times []int64
	for i := range int64(10) {
		times = append(times, 1000*(i/2+1))
	}
	appendTimed(t, f, 0, times...)
	for _, c := range []struct {
		since, until int64
		want         []int64
	}{
		{0, 0, seqRange(0, 10)},
		{2000, 4000, seqRange(2, 6)}, // since inclusive, until exclusive
		{1999, 4001, seqRange(2, 8)},
		{2001, 3000, []int64{}},
		{5000, 0, seqRange(8, 10)},
		{5001, 0, []int64{}},
		{0, 1001, seqRange(0, 2)},
		{0, 1000 + 1, seqRange(0, 2)},
		{0, 1, []int64{}},
	} {
		res := mustQuery(t, f, MessageQuery{Subject: "s", Since: c.since, Until: c.until, FromSeq: -1, Limit: 100})
		if got := resultSeqs(t, res); !slices.Equal(got, c.want) || res.Next != -1 || res.Truncated {
			t.Errorf("window [%d, %d): %v next %d truncated %v, want %v next -1", c.since, c.until, got, res.Next, res.Truncated, c.want)
		}
	}
	// A window's result carries where each message lies and its record size.
	res := mustQuery(t, f, MessageQuery{Subject: "s", Since: 3000, Until: 3001, FromSeq: -1, Limit: 1})
	for _, sm := range res.Messages {
		at, err := f.Locate("s", sm.Seq)
		if err != nil || at.Offset != sm.Offset || at.Size != sm.Size {
			t.Fatalf("sequence %d: query says %d/%d, Locate %+v %v", sm.Seq, sm.Offset, sm.Size, at, err)
		}
	}
	// A page of a window stops at the limit; Next continues it, and Since
	// still bounds a page that starts from a sequence before it.
	res = mustQuery(t, f, MessageQuery{Subject: "s", Since: 2000, Until: 5000, FromSeq: -1, Limit: 3})
	if got := resultSeqs(t, res); !slices.Equal(got, seqRange(2, 5)) || res.Next != 5 {
		t.Fatalf("first page %v next %d", got, res.Next)
	}
	res = mustQuery(t, f, MessageQuery{Subject: "s", Since: 2000, Until: 5000, FromSeq: res.Next, Limit: 3})
	if got := resultSeqs(t, res); !slices.Equal(got, seqRange(5, 8)) || res.Next != -1 {
		t.Fatalf("second page %v next %d, want 5..7 and -1 (the next entry is past until)", got, res.Next)
	}
	res = mustQuery(t, f, MessageQuery{Subject: "s", Since: 3000, FromSeq: 0, Limit: 100})
	if got := resultSeqs(t, res); !slices.Equal(got, seqRange(4, 10)) {
		t.Fatalf("from sequence 0 since 3000: %v, want 4..9", got)
	}
}

func TestQueryBrowsePagesSeeEveryMessageOnce(t *testing.T) {
	f := unitFSM(t)
	var times []int64
	for i := range int64(53) {
		times = append(times, 1000+i)
	}
	appendTimed(t, f, 0, times...)
	for _, limit := range []int{1, 7, 53, 100} {
		var seen []int64
		pages := 0
		for from := int64(0); from >= 0; pages++ {
			if pages > 60 {
				t.Fatalf("limit %d: no end after %d pages", limit, pages)
			}
			res := mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: from, Limit: limit})
			if len(res.Messages) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(res.Messages))
			}
			seen = append(seen, resultSeqs(t, res)...)
			from = res.Next
		}
		if !slices.Equal(seen, seqRange(0, 53)) {
			t.Fatalf("limit %d: pages saw %v", limit, seen)
		}
		if want := (53 + limit - 1) / limit; pages != want {
			t.Fatalf("limit %d: %d pages, want %d (a page ending with the log says Next -1)", limit, pages, want)
		}
	}
	// A sequence past the end is an empty page, the end of the browse.
	if res := mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: 1000, Limit: 5}); len(res.Messages) != 0 || res.Next != -1 {
		t.Fatalf("past the end: %+v", res)
	}
}

// collidingTag returns a tag other than tag whose TagMask bit is tag's.
func collidingTag(tb testing.TB, tag string) string {
	tb.Helper()
	want := message.TagMask([]string{tag})
	for i := range 10000 {
		if c := fmt.Sprint("t", i); c != tag && message.TagMask([]string{c}) == want {
			return c
		}
	}
	tb.Fatal("no colliding tag")
	return ""
}

func TestQueryTagFilter(t *testing.T) {
	f := unitFSM(t)
	twin := collidingTag(t, "red")
	msgs := []*message.Message{
		queryMsg("m0", "s", "", "red"),
		queryMsg("m1", "s", "", "blue"),
		queryMsg("m2", "s", "", twin), // shares red's bit: read, then refused
		queryMsg("m3", "s", ""),
		queryMsg("m4", "s", "", "blue", "red"),
		queryMsg("m5", "s", "", twin, "green"),
		queryMsg("m6", "s", "", "red"),
	}
	appendAt(t, f, 1, 1000, msgs...)
	res := mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Tag: "red", Limit: 100})
	if got := resultSeqs(t, res); !slices.Equal(got, []int64{0, 4, 6}) || res.Scanned != 7 || res.Next != -1 {
		t.Fatalf("tag red: %v scanned %d next %d, want 0 4 6, 7, -1", got, res.Scanned, res.Next)
	}
	res = mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Tag: twin, Limit: 100})
	if got := resultSeqs(t, res); !slices.Equal(got, []int64{2, 5}) {
		t.Fatalf("tag %s: %v, want 2 5", twin, got)
	}
	res = mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Tag: "nowhere", Limit: 100})
	if len(res.Messages) != 0 || res.Next != -1 {
		t.Fatalf("a tag no message has: %+v", res)
	}
}

func TestQueryKeyFilter(t *testing.T) {
	f := unitFSM(t)
	other := queryMsg("m3", "s", "", "red")
	other.Properties = []message.Property{{Key: "order", Value: "A"}} // the value, under another property
	appendAt(t, f, 1, 1000,
		queryMsg("m0", "s", "A", "red"),
		queryMsg("m1", "s", "B", "red"),
		queryMsg("m2", "s", "A"),
		other,
		queryMsg("m4", "s", "AA", "red"),
		queryMsg("m5", "s", "A", "blue"),
	)
	res := mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Key: "A", Limit: 100})
	if got := resultSeqs(t, res); !slices.Equal(got, []int64{0, 2, 5}) {
		t.Fatalf("key A: %v, want 0 2 5", got)
	}
	res = mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Key: "A", Tag: "red", Limit: 100})
	if got := resultSeqs(t, res); !slices.Equal(got, []int64{0}) {
		t.Fatalf("key A and tag red: %v, want 0", got)
	}
	if k, _ := propertyOf(res.Messages[0].Message, message.KeyProperty); k != "A" {
		t.Fatalf("key of the result %q", k)
	}
	// Any property: its value must match, and a message without it does
	// not, even for an empty value.
	res = mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Property: "order", PropertyValue: "A", Limit: 100})
	if got := resultSeqs(t, res); !slices.Equal(got, []int64{3}) {
		t.Fatalf("property order=A: %v, want 3", got)
	}
	res = mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Property: "order", Limit: 100})
	if got := resultSeqs(t, res); len(got) != 0 {
		t.Fatalf("property order=\"\": %v, want none", got)
	}
	res = mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Property: message.KeyProperty, PropertyValue: "B", Limit: 100})
	if got := resultSeqs(t, res); !slices.Equal(got, []int64{1}) {
		t.Fatalf("property qmq.key=B: %v, want 1", got)
	}
	for _, q := range []MessageQuery{
		{Subject: "s", FromSeq: -1, PropertyValue: "A", Limit: 1},
		{Subject: "s", FromSeq: -1, Property: strings.Repeat("p", message.MaxPropertyKey+1), Limit: 1},
		{Subject: "s", FromSeq: -1, Property: "p", PropertyValue: strings.Repeat("v", message.MaxPropertyVal+1), Limit: 1},
	} {
		if _, err := f.QueryMessages(q); !errors.Is(err, ErrInvalid) {
			t.Errorf("property %.20q=%.20q: %v, want ErrInvalid", q.Property, q.PropertyValue, err)
		}
	}
}

func TestQueryBudgetTruncatesAndNextLosesNothing(t *testing.T) {
	f := unitFSM(t)
	var msgs []*message.Message
	var want []int64
	for i := range 95 {
		tag := "common"
		if i%10 == 3 {
			tag, want = "rare", append(want, int64(i))
		}
		msgs = append(msgs, queryMsg(fmt.Sprint("m", i), "s", "", tag))
	}
	appendAt(t, f, 1, 1000, msgs...)
	res := mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Tag: "rare", Limit: 100, Budget: 12})
	if got := resultSeqs(t, res); !slices.Equal(got, []int64{3}) || !res.Truncated || res.Scanned != 12 || res.Next != 12 {
		t.Fatalf("budget 12: %v truncated %v scanned %d next %d, want [3] true 12 12", got, res.Truncated, res.Scanned, res.Next)
	}
	var seen []int64
	pages := 0
	for from := int64(0); from >= 0; pages++ {
		if pages > 20 {
			t.Fatalf("no end after %d pages", pages)
		}
		res := mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: from, Tag: "rare", Limit: 100, Budget: 12})
		if res.Scanned > 12 || res.Truncated != (res.Next >= 0) {
			t.Fatalf("page from %d: scanned %d truncated %v next %d", from, res.Scanned, res.Truncated, res.Next)
		}
		seen = append(seen, resultSeqs(t, res)...)
		from = res.Next
	}
	if !slices.Equal(seen, want) || pages != 8 {
		t.Fatalf("pages (%d) saw %v, want %v in 8", pages, seen, want)
	}
	// A budget that ends with the log is not a truncation.
	res = mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: 83, Limit: 100, Budget: 12})
	if res.Truncated || res.Next != -1 || res.Scanned != 12 {
		t.Fatalf("budget ending at the log's end: %+v", res)
	}
	// Nor is one that ends with the window: the next entry is past Until.
	g := unitFSM(t)
	appendTimed(t, g, 0, 1000, 2000, 3000, 4000, 5000)
	res = mustQuery(t, g, MessageQuery{Subject: "s", FromSeq: -1, Since: 2000, Until: 4000, Limit: 100, Budget: 2})
	if got := resultSeqs(t, res); !slices.Equal(got, []int64{1, 2}) || res.Truncated || res.Next != -1 {
		t.Fatalf("budget ending with the window: %v %+v", got, res)
	}
	res = mustQuery(t, g, MessageQuery{Subject: "s", FromSeq: -1, Since: 2000, Until: 4001, Limit: 100, Budget: 2})
	if !res.Truncated || res.Next != 3 {
		t.Fatalf("budget ending inside the window: %+v", res)
	}
	// The default budget is DefaultScanBudget, more than this subject holds.
	res = mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Tag: "rare", Limit: 100})
	if got := resultSeqs(t, res); !slices.Equal(got, want) || res.Truncated || res.Scanned != 95 {
		t.Fatalf("default budget: %v truncated %v scanned %d", got, res.Truncated, res.Scanned)
	}
}

func TestQueryLimits(t *testing.T) {
	f := unitFSM(t)
	n := limits.MaxQueryResults + 5
	var msgs []*message.Message
	for i := range n {
		msgs = append(msgs, queryMsg(fmt.Sprint("m", i), "s", ""))
	}
	appendAt(t, f, 1, 1000, msgs...)
	ok := MessageQuery{Subject: "s", FromSeq: -1, Limit: 1}
	for name, c := range map[string]func(*MessageQuery){
		"limit 0":                func(q *MessageQuery) { q.Limit = 0 },
		"limit -1":               func(q *MessageQuery) { q.Limit = -1 },
		"limit over":             func(q *MessageQuery) { q.Limit = limits.MaxQueryResults + 1 },
		"budget over":            func(q *MessageQuery) { q.Budget = limits.MaxScanBudget + 1 },
		"budget negative":        func(q *MessageQuery) { q.Budget = -1 },
		"since before the epoch": func(q *MessageQuery) { q.Since = -1 },
		"until at since":         func(q *MessageQuery) { q.Since, q.Until = 5, 5 },
		"until before since":     func(q *MessageQuery) { q.Since, q.Until = 5, 4 },
		"until before the epoch": func(q *MessageQuery) { q.Until = -1 },
		"tag too long":           func(q *MessageQuery) { q.Tag = strings.Repeat("t", message.MaxTagLen+1) },
		"key too long":           func(q *MessageQuery) { q.Key = strings.Repeat("k", message.MaxPropertyVal+1) },
		"no subject":             func(q *MessageQuery) { q.Subject = "" },
		"subject of a bad name":  func(q *MessageQuery) { q.Subject = "a/../b" },
		"subject of a long name": func(q *MessageQuery) { q.Subject = strings.Repeat("s", limits.MaxName+1) },
	} {
		q := ok
		c(&q)
		if res, err := f.QueryMessages(q); !errors.Is(err, ErrInvalid) || res != nil {
			t.Errorf("%s: %v %v, want an error wrapping ErrInvalid", name, res, err)
		}
	}
	for name, c := range map[string]func(*MessageQuery){
		"limit 1":              func(q *MessageQuery) {},
		"budget at the bound":  func(q *MessageQuery) { q.Budget = limits.MaxScanBudget },
		"tag at the bound":     func(q *MessageQuery) { q.Tag = strings.Repeat("t", message.MaxTagLen) },
		"key at the bound":     func(q *MessageQuery) { q.Key = strings.Repeat("k", message.MaxPropertyVal) },
		"until just after":     func(q *MessageQuery) { q.Since, q.Until = 5, 6 },
		"subject at the bound": func(q *MessageQuery) { q.Subject = strings.Repeat("s", limits.MaxName) },
	} {
		q := ok
		c(&q)
		if _, err := f.QueryMessages(q); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	res := mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: -1, Limit: limits.MaxQueryResults})
	if got := resultSeqs(t, res); !slices.Equal(got, seqRange(0, limits.MaxQueryResults)) || res.Next != limits.MaxQueryResults {
		t.Fatalf("limit MaxQueryResults: %d messages, next %d", len(got), res.Next)
	}
	res = mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: res.Next, Limit: limits.MaxQueryResults})
	if got := resultSeqs(t, res); !slices.Equal(got, seqRange(int64(limits.MaxQueryResults), int64(n))) || res.Next != -1 {
		t.Fatalf("the rest: %v next %d", got, res.Next)
	}
}

func TestQueryUnknownSubject(t *testing.T) {
	f := unitFSM(t)
	appendAt(t, f, 1, 1000, queryMsg("m0", "s", ""))
	for _, q := range []MessageQuery{
		{Subject: "other", FromSeq: -1, Limit: 10},
		{Subject: "other", FromSeq: 0, Since: 5, Until: 10, Tag: "x", Key: "k", Limit: 10},
	} {
		res, err := f.QueryMessages(q)
		if err != nil || res == nil || len(res.Messages) != 0 || res.Next != -1 || res.Truncated || res.Scanned != 0 {
			t.Fatalf("unknown subject: %+v %v, want an empty result and next -1", res, err)
		}
	}
}

func TestQueryAfterRetention(t *testing.T) {
	f := retentionFSM(t, logs.Retention{MaxBytes: 2 << 20})
	// 4,000 messages of 1 KiB: retention removes message-log segments and,
	// past the first 1,638 entries (a consume-log segment), consume-log
	// segments too.
	const n = 4000
	for b := range n / 100 {
		var msgs []*message.Message
		for i := b * 100; i < (b+1)*100; i++ {
			m := unitMsg(fmt.Sprint("m", i), "s", 1<<10)
			m.Tags = []string{"all"}
			msgs = append(msgs, m)
		}
		appendAt(t, f, uint64(b+1), 1000+int64(b), msgs...)
	}
	first := int64(-1)
	for seq := range int64(n) {
		if _, err := f.Message("s", seq); err == nil {
			first = seq
			break
		}
	}
	if first <= 0 || f.store.consumeLog("s").StartSeq() == 0 {
		t.Fatalf("retention removed too little: first retained %d, consume log from %d", first, f.store.consumeLog("s").StartSeq())
	}
	for _, q := range []MessageQuery{
		{Subject: "s", FromSeq: 0, Limit: 100},
		{Subject: "s", FromSeq: -1, Limit: 100},
		{Subject: "s", FromSeq: -1, Since: 1000, Limit: 100, Tag: "all"},
	} {
		res := mustQuery(t, f, q)
		if got := resultSeqs(t, res); !slices.Equal(got, seqRange(first, first+100)) || res.Next != first+100 {
			t.Fatalf("%+v: %d messages from %v, next %d, want %d..%d", q, len(got), got[:min(len(got), 1)], res.Next, first, first+99)
		}
	}
	// An entry whose message retention removed, as a query reading it
	// while retention runs finds it, is passed over, not a failure.
	s := &queryScan{f: f, q: &MessageQuery{Subject: "s"}}
	if _, ok, err := s.match(logs.ConsumeEntry{Offset: 0, Size: 100}, 0); ok || err != nil {
		t.Fatalf("a removed message: match %v %v", ok, err)
	}
	// So is a run of entries retention removed from under the scan: it
	// goes on from the first retained.
	s.budget, s.res = 100, &MessageQueryResult{Next: -1}
	if seq, done, err := s.run(0); err != nil || done || seq < first {
		t.Fatalf("a run of removed entries: %d %v %v, want to go on from %d", seq, done, err, first)
	}
}

func TestQueryChangesNothing(t *testing.T) {
	f := unitFSM(t)
	appendTimed(t, f, 0, 1000, 2000, 3000, 4000)
	before, files := stateBytes(f), dataFiles(t, f.cfg.Dir)
	applied := f.Applied()
	for _, q := range []MessageQuery{
		{Subject: "s", FromSeq: -1, Limit: 10},
		{Subject: "s", FromSeq: 1, Limit: 1},
		{Subject: "s", FromSeq: -1, Since: 2000, Until: 3000, Limit: 10, Tag: "x"},
		{Subject: "s", FromSeq: -1, Limit: 10, Key: "k", Budget: 1},
		{Subject: "none", FromSeq: -1, Limit: 10},
	} {
		mustQuery(t, f, q)
	}
	wantStateUnchanged(t, f, before)
	wantSameFilesAs(t, f.cfg.Dir, files)
	if g := f.ConsumerGroups(); len(g) != 0 || len(f.Consumers()) != 0 || f.Applied() != applied {
		t.Fatalf("queries left groups %v, consumers %v, applied %d (was %d)", g, f.Consumers(), f.Applied(), applied)
	}
	// A group created after the queries starts where a first pull starts,
	// at the latest: the queries consumed nothing.
	r := resultAs[*PullResult](t, applyAt(f, 10, &Pull{Start: StartEarliest, Now: 5000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10}))
	if got := consumeSeqs(r); !slices.Equal(got, seqRange(0, 4)) {
		t.Fatalf("a pull after the queries: %v", got)
	}
}

// wantSameFilesAs asserts that the data files of dir are files.
func wantSameFilesAs(tb testing.TB, dir string, files map[string][]byte) {
	tb.Helper()
	now := dataFiles(tb, dir)
	if len(now) != len(files) {
		tb.Fatalf("%d data files, were %d", len(now), len(files))
	}
	for name, b := range files {
		if string(now[name]) != string(b) {
			tb.Fatalf("data file %s changed", name)
		}
	}
}

// TestQueryWhileApplying queries a subject on other goroutines while
// appends apply: every page holds the messages its sequences name, in
// order, and a browse sees each message once. Run it with -race.
func TestQueryWhileApplying(t *testing.T) {
	f := unitFSM(t)
	const total = 400
	appendAt(t, f, 1, 1000, queryMsg("m0", "s", ""))
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				var seen []int64
				for from, pages := int64(0), 0; from >= 0; pages++ {
					if pages > total/7+1 {
						errs <- fmt.Errorf("a browse has no end after %d pages", pages)
						return
					}
					res, err := f.QueryMessages(MessageQuery{Subject: "s", FromSeq: from, Limit: 7})
					if err != nil {
						errs <- err
						return
					}
					for _, sm := range res.Messages {
						if sm.Message.ID != fmt.Sprint("m", sm.Seq) {
							errs <- fmt.Errorf("sequence %d holds %s", sm.Seq, sm.Message.ID)
							return
						}
						seen = append(seen, sm.Seq)
					}
					from = res.Next
				}
				if !slices.Equal(seen, seqRange(0, int64(len(seen)))) {
					errs <- fmt.Errorf("a browse saw %v", seen)
					return
				}
			}
		}()
	}
	for i := 1; i < total; i++ {
		appendAt(t, f, uint64(i+1), 1000+int64(i), queryMsg(fmt.Sprint("m", i), "s", ""))
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// BenchmarkQueryRareTag: one query over a window of 100,000 entries with
// a tag filter that 1 % of them match (1,000 results, the limit).
func BenchmarkQueryRareTag(b *testing.B) {
	f := unitOpen(b, DefaultConfig(b.TempDir()))
	const n, batch = 100_000, 10_000
	if message.TagMask([]string{"rare"}) == message.TagMask([]string{"common"}) {
		b.Fatal("the tags share a bit")
	}
	idx := uint64(0)
	for i := 0; i < n; i += batch {
		msgs := make([]*message.Message, batch)
		for j := range msgs {
			tag := "common"
			if (i+j)%100 == 0 {
				tag = "rare"
			}
			msgs[j] = &message.Message{ID: fmt.Sprint("m", i+j), Subject: "s", CreatedAt: 1, Tags: []string{tag}, Body: make([]byte, 100)}
		}
		idx++
		appendAt(b, f, idx, 1000+int64(i), msgs...)
	}
	q := MessageQuery{Subject: "s", FromSeq: -1, Since: 1000, Until: 1000 + n, Tag: "rare", Limit: limits.MaxQueryResults}
	b.ReportAllocs()
	b.ResetTimer()
	scanned := 0
	for i := 0; i < b.N; i++ {
		res, err := f.QueryMessages(q)
		if err != nil || len(res.Messages) != n/100 || res.Truncated {
			b.Fatalf("%d messages, truncated %v, %v", len(res.Messages), res.Truncated, err)
		}
		scanned += res.Scanned
	}
	b.ReportMetric(float64(scanned)/b.Elapsed().Seconds(), "entries/s")
}

// MaxBytes ends a page before the message that would pass it (a page
// holds at least one), and Next goes on from that message: paging with a
// byte bound sees every message once.
func TestQueryMaxBytesPagesLoseNothing(t *testing.T) {
	f := unitFSM(t)
	var times []int64
	for i := range int64(20) {
		times = append(times, 1000+i)
	}
	appendTimed(t, f, 0, times...)
	size := mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: 0, Limit: 1}).Messages[0].Size
	for _, maxBytes := range []int{1, size, 3*size - 1, 3 * size} {
		var seen []int64
		for from, pages := int64(0), 0; from >= 0; pages++ {
			if pages > 25 {
				t.Fatalf("max bytes %d: no end", maxBytes)
			}
			res := mustQuery(t, f, MessageQuery{Subject: "s", FromSeq: from, Limit: 100, MaxBytes: maxBytes})
			if len(res.Messages) == 0 || len(res.Messages) > max(1, maxBytes/size) {
				t.Fatalf("max bytes %d (messages of %d): a page of %d", maxBytes, size, len(res.Messages))
			}
			seen = append(seen, resultSeqs(t, res)...)
			from = res.Next
		}
		if !slices.Equal(seen, seqRange(0, 20)) {
			t.Fatalf("max bytes %d: pages saw %v", maxBytes, seen)
		}
	}
}

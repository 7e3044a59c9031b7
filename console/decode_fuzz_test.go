package console

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/transport"
)

// The decoders refuse what they should, never panic, and whatever they
// accept stays within the API's bounds.

func FuzzParsePage(f *testing.F) {
	for _, s := range []string{"", "offset=0&limit=1", "limit=1000", "limit=1001", "offset=-1", "q=orders.", "limit=1&limit=2", "offset=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p, err := parsePage(q)
		if err != nil {
			return
		}
		if p.Offset < 0 || p.Limit < 1 || p.Limit > MaxLimit || len(p.Prefix) > 200 {
			t.Fatalf("%q accepted as %+v", raw, p)
		}
	})
}

func FuzzDecodeBodies(f *testing.F) {
	for _, s := range []string{`{"all":true}`, `{"broker_group":"g1","seqs":[1,2]}`, `{"to":"earliest"}`, `{"to":"time","at":"2026-01-01T00:00:00Z"}`,
		`{"max_deliveries":3,"ack_wait":"30s"}`, `{"code":"ops","secret":"x"}`, `{"start":"time"}`, `[`, `{"seqs":[-1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if sel, err := decodeDeadLetterOp(b); err == nil {
			if sel.All == (len(sel.Seqs) > 0) || len(sel.Seqs) > MaxSeqs {
				t.Fatalf("%q accepted as %+v", b, sel)
			}
			for _, s := range sel.Seqs {
				if s < 0 {
					t.Fatalf("%q: sequence %d", b, s)
				}
			}
		}
		if to, err := decodeReset(b); err == nil && to.At.Before(time.UnixMilli(0)) && !to.At.IsZero() {
			t.Fatalf("%q accepted as %+v", b, to)
		}
		decodeSet(b)
		if l, err := decodeLogin(b); err == nil && (l.Secret == "" || len(l.Secret) > 1024 || checkCode(l.Code) != nil) {
			t.Fatalf("%q accepted as %+v", b, l)
		}
	})
}

func FuzzCheckCSRF(f *testing.F) {
	f.Add("1", "http://127.0.0.1:1", "same-origin", "127.0.0.1:1", "")
	f.Add("", "", "", "h", "tok")
	f.Fuzz(func(t *testing.T, tok, origin, site, host, csrf string) {
		r, _ := http.NewRequest("POST", "http://x/", nil)
		r.Host = host
		r.Header.Set(CSRFHeader, tok)
		r.Header.Set("Origin", origin)
		r.Header.Set("Sec-Fetch-Site", site)
		code, _ := checkCSRF(r, caller{csrf: csrf, session: csrf != ""})
		if code != "" {
			return
		}
		if r.Header.Get(CSRFHeader) == "" || csrf != "" && tok != csrf {
			t.Fatalf("accepted without its token: %q, session %q", tok, csrf)
		}
		if o := r.Header.Get("Origin"); o != "" && !strings.HasSuffix(strings.ToLower(o), "//"+strings.ToLower(host)) {
			t.Fatalf("accepted from origin %q for host %q", o, host)
		}
	})
}

// Sessions are bounded, and expire.
func TestSessionsBoundedAndExpire(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s := &sessions{m: map[string]*session{}, now: func() time.Time { return now }}
	first := s.add("a", "x")
	for range MaxSessions + 10 {
		s.add("a", "x")
		now = now.Add(time.Millisecond)
	}
	if s.len() != MaxSessions {
		t.Fatalf("%d sessions, want at most %d", s.len(), MaxSessions)
	}
	if s.get(first.id) != nil {
		t.Error("the oldest session was not evicted")
	}
	last := s.add("b", "y")
	if s.get(last.id) == nil {
		t.Fatal("a new session is not found")
	}
	now = now.Add(SessionExpiry + time.Second)
	if s.get(last.id) != nil {
		t.Error("a session past its expiry is still found")
	}
}

// A page of 10,000 subjects is cut fast: sorted once, found by binary search.
func TestSubjectsPageOf10000(t *testing.T) {
	rs := make([]admin.Route, 10_000)
	for i := range rs {
		rs[i].Subject = fmt.Sprintf("s%05d", (i*7919)%10_000)
	}
	start := time.Now()
	p := pageSubjects(rs, page{Offset: 10, Limit: 5, Prefix: "s01"})
	if p.Total != 1000 || len(p.Subjects) != 5 || p.Subjects[0].Subject != "s01010" {
		t.Fatalf("page: total %d, %+v", p.Total, p.Subjects)
	}
	for range 100 {
		pageSubjects(rs, page{Offset: 9990, Limit: MaxLimit})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("101 pages of 10,000 subjects took %v", d)
	}
	if p := pageSubjects(rs, page{Offset: 9990, Limit: MaxLimit}); p.Total != 10_000 || len(p.Subjects) != 10 {
		t.Errorf("last page: %d of %d", len(p.Subjects), p.Total)
	}
	if p := pageSubjects(rs, page{Limit: 1, Prefix: "t"}); p.Total != 0 || len(p.Subjects) != 0 {
		t.Errorf("no match: %+v", p)
	}
}

// Errors of qmq and admin map to their HTTP statuses.
func TestStatusOf(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("x: %w", qmq.ErrUnauthenticated), 401},
		{fmt.Errorf("x: %w", qmq.ErrPermissionDenied), 403},
		{fmt.Errorf("x: %w", admin.ErrNoConsumerGroup), 404},
		{fmt.Errorf("x: %w", admin.ErrNoDeadLetter), 404},
		{fmt.Errorf("x: %w", admin.ErrNotInRoute), 404},
		{fmt.Errorf("x: %w", qmq.ErrInvalidName), 400},
		{&transport.Error{Code: transport.Invalid}, 400},
		{fmt.Errorf("x: %w", qmq.ErrUnreachable), 503},
		{&http.MaxBytesError{Limit: 1}, 413},
		{badf("bad"), 400},
		{errors.New("other"), 500},
	} {
		if st, code := statusOf(c.err); st != c.status || code == "" {
			t.Errorf("%v: %d %q, want %d", c.err, st, code, c.status)
		}
	}
}

// The history ring keeps the last HistoryPoints points, oldest first.
func TestHistoryRing(t *testing.T) {
	h := newHistory(&handler{now: time.Now})
	t0 := time.Unix(0, 0)
	for i := range HistoryPoints + 40 {
		h.add(Point{At: t0.Add(time.Duration(i) * time.Second)})
	}
	ps := h.points()
	if len(ps) != HistoryPoints || !ps[0].At.Equal(t0.Add(40*time.Second)) || !ps[len(ps)-1].At.Equal(t0.Add(time.Duration(HistoryPoints+39)*time.Second)) {
		t.Fatalf("%d points, from %v to %v", len(ps), ps[0].At, ps[len(ps)-1].At)
	}
}

// Admin clients are kept per application and secret, at most MaxClients,
// and dropped when idle.
func TestClientsBounded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	opened := 0
	c := &clients{now: func() time.Time { return now }, m: map[string]*list.Element{}, lru: list.New(),
		open: func(code, secret string) (*admin.Client, error) { opened++; return admin.New("127.0.0.1:1") }}
	a1, err := c.get("a", "x")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.get("a", "x"); again != a1 || opened != 1 {
		t.Fatalf("the same application and secret: a new client (%d opened)", opened)
	}
	if other, _ := c.get("a", "y"); other == a1 {
		t.Fatal("another secret shares the client")
	}
	for i := range MaxClients + 10 {
		c.get(fmt.Sprint("app", i), "s")
	}
	if n := c.lru.Len(); n > MaxClients || len(c.m) != n {
		t.Fatalf("%d clients kept (%d in the map), at most %d", n, len(c.m), MaxClients)
	}
	now = now.Add(ClientIdle + time.Second)
	c.get("fresh", "s")
	if c.lru.Len() != 1 {
		t.Fatalf("%d clients after the others went idle", c.lru.Len())
	}
}

// Samples taken with one application's rights are not shown to another.
func TestHistoryPerApplication(t *testing.T) {
	h := newHistory(&handler{now: time.Now})
	h.running = true // no sampler: the test adds the points
	h.look(caller{code: "a", secret: "x"}, "")
	h.add(Point{At: time.Now()})
	h.look(caller{code: "a", secret: "x"}, "")
	if len(h.points()) != 1 {
		t.Fatal("the same application lost its samples")
	}
	h.look(caller{code: "b", secret: "y"}, "")
	if n := len(h.points()); n != 0 {
		t.Fatalf("another application sees %d samples of the first", n)
	}
	// a looks again after b (the ring is a's again, with a's sample), and
	// b, which looked before, asks for the points: it sees none of a's.
	h.look(caller{code: "a", secret: "x"}, "")
	h.addAs(Point{At: time.Now()}, "a", "x")
	if n := len(h.pointsOf(caller{code: "b", secret: "y"})); n != 0 {
		t.Fatalf("an application that looked before another sees %d of its samples", n)
	}
	if n := len(h.pointsOf(caller{code: "a", secret: "x"})); n != 1 {
		t.Fatalf("the application looking sees %d of its samples, want 1", n)
	}
}

// The lags of the WatchedGroups pages opened last are sampled: a page
// opened again moves to the end, the oldest goes, and another
// application starts with none.
func TestHistoryWatchedBounded(t *testing.T) {
	h := newHistory(&handler{now: time.Now})
	h.running = true
	a := caller{code: "a", secret: "x"}
	for i := range WatchedGroups + 8 {
		h.look(a, fmt.Sprintf("s/g%d", i))
	}
	h.look(a, "s/g8") // the oldest kept: now the latest
	h.look(a, "")     // the cluster page: watches nothing new
	w := slices.Clone(h.watched)
	if len(w) != WatchedGroups || w[0] != "s/g9" || w[len(w)-1] != "s/g8" {
		t.Fatalf("watching %d: %v", len(w), w)
	}
	h.look(caller{code: "b", secret: "y"}, "")
	if w := h.watched; len(w) != 0 {
		t.Fatalf("another application inherits the watched groups %v", w)
	}
}

// A first look waits for the sampler's first point, at most
// FirstLookWait or until its request ends, and never returns another
// application's; a look by another application has the sampler sample at
// once for it.
func TestFirstLookWaits(t *testing.T) {
	h := newHistory(&handler{now: time.Now})
	h.running = true // no sampler: the test adds the points
	a, b := caller{code: "a", secret: "x"}, caller{code: "b", secret: "y"}
	h.look(a, "")
	start := time.Now()
	if ps := h.firstPoint(context.Background(), a); len(ps) != 0 || time.Since(start) < FirstLookWait {
		t.Fatalf("no point: %d points after %s, want none after %s", len(ps), time.Since(start), FirstLookWait)
	}
	select { // a was the first to look: the sampler is woken for it
	case <-h.wake:
	default:
		t.Fatal("the first application looks: the sampler is not woken")
	}
	// From here a wait ends by a point or the request, never the bound.
	h.wait = time.Hour
	got := make(chan []Point, 1)
	go func() { got <- h.firstPoint(context.Background(), a) }()
	h.addAs(Point{At: time.Now()}, "a", "x")
	select {
	case ps := <-got:
		if len(ps) != 1 {
			t.Fatalf("a point added while waiting: %d points", len(ps))
		}
	case <-time.After(time.Minute):
		t.Fatal("a point added: the first look still waits")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { got <- h.firstPoint(ctx, b) }() // b has not looked: a's ring
	h.addAs(Point{At: time.Now()}, "a", "x")
	cancel()
	select {
	case ps := <-got:
		if len(ps) != 0 {
			t.Fatalf("another application's first look sees %d of a's points", len(ps))
		}
	case <-time.After(time.Minute):
		t.Fatal("the request ended: its first look still waits")
	}
	h.look(b, "")
	select {
	case <-h.wake:
	default:
		t.Fatal("another application looks: the sampler is not woken")
	}
}

// FuzzWatchedKey: a history query is refused with a client error, or
// names a consumer group by two valid names.
func FuzzWatchedKey(f *testing.F) {
	for _, s := range []string{"", "subject=orders&group=billing", "subject=orders", "group=billing", "subject=a&group=b&x=1",
		"subject=a&subject=b&group=c", "subject=bad%20name&group=g", "subject=a%2Fb&group=c", "subject=&group=", "subject"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		key, err := watchedKey(q)
		if err != nil {
			if st, _ := statusOf(err); st != http.StatusBadRequest {
				t.Fatalf("%q: %v answered %d, want 400", raw, err, st)
			}
			return
		}
		if key == "" {
			if q.Has("subject") || q.Has("group") {
				t.Fatalf("%q: no group watched, and no error", raw)
			}
			return
		}
		subject, group, ok := strings.Cut(key, "/")
		if !ok || limits.CheckName("subject", subject) != nil || limits.CheckName("consumer group", group) != nil || strings.Contains(group, "/") {
			t.Fatalf("%q: watches %q", raw, key)
		}
	})
}

func FuzzParseMessageQuery(f *testing.F) {
	for _, s := range []string{"", "since=1h", "since=2026-01-31T09:00:00Z&until=1m", "from_seq=0&broker_group=g1&limit=1000",
		"from_seq=-1", "limit=1001", "budget=1000001", "body=1&tag=t&key=k", "since=-5m", "since=1h&from_seq=3",
		"property=region%3Deu", "property=region", "property=%3Deu", "since=2562047h"} {
		f.Add(s)
	}
	now := time.UnixMilli(1_800_000_000_000)
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		mq, err := parseMessageQuery(q, now)
		if err != nil {
			var br badRequest
			if !errors.As(err, &br) {
				t.Fatalf("%q: an error that is not a bad request: %v", raw, err)
			}
			return
		}
		switch {
		case mq.FromSeq == nil && mq.Since.IsZero():
			t.Fatalf("%q: no start", raw)
		case mq.FromSeq != nil && (*mq.FromSeq < 0 || !mq.Since.IsZero()):
			t.Fatalf("%q: from %v and since %v", raw, *mq.FromSeq, mq.Since)
		case mq.Limit < 0 || mq.Limit > 1000 || mq.Budget < 0 || mq.Budget > 1_000_000:
			t.Fatalf("%q: limit %d, budget %d", raw, mq.Limit, mq.Budget)
		case !mq.Until.IsZero() && !mq.Until.After(mq.Since):
			t.Fatalf("%q: until %v not after since %v", raw, mq.Until, mq.Since)
		case mq.Since.After(now) || (!mq.Since.IsZero() && mq.Since.Before(time.UnixMilli(0))):
			t.Fatalf("%q: since %v after now or before 1970", raw, mq.Since)
		case mq.PropertyValue != "" && mq.Property == "":
			t.Fatalf("%q: a property value without a name", raw)
		}
	})
}

func FuzzParseExportQuery(f *testing.F) {
	for _, s := range []string{"", "limit=10000", "limit=10001", "limit=0", "limit=1&limit=2", "since=1h&limit=5", "from_seq=3&broker_group=g1", "nope=1"} {
		f.Add(s)
	}
	now := time.UnixMilli(1_800_000_000_000)
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		mq, n, err := parseExportQuery(q, now)
		if err != nil {
			var br badRequest
			if !errors.As(err, &br) {
				t.Fatalf("%q: an error that is not a bad request: %v", raw, err)
			}
			return
		}
		if n < 1 || n > MaxExportMessages || mq.Limit != 0 || (mq.FromSeq == nil && mq.Since.IsZero()) {
			t.Fatalf("%q: an export of %d, listing limit %d, from %v since %v", raw, n, mq.Limit, mq.FromSeq, mq.Since)
		}
	})
}

// A point's rates are its subjects' consume-log growth since the last
// point, a second, summed over broker groups, of the TopN that grew
// most; only the newest point keeps the ends they are counted from.
func TestHistoryRates(t *testing.T) {
	h := newHistory(&handler{now: time.Now})
	t0 := time.Unix(1_000, 0)
	first := map[string]int64{"a\x00g1": 10, "a\x00g2": 0, "b\x00g1": 5}
	for i := range TopN + 2 {
		first[fmt.Sprintf("s%02d\x00g1", i)] = 0
	}
	h.add(Point{At: t0, ends: first})
	second := map[string]int64{"a\x00g1": 30, "a\x00g2": 10, "b\x00g1": 5, "c\x00g1": 100}
	for i := range TopN + 2 {
		second[fmt.Sprintf("s%02d\x00g1", i)] = int64(i + 1)
	}
	h.add(Point{At: t0.Add(10 * time.Second), ends: second})
	ps := h.points()
	if len(ps) != 2 || ps[0].Rates != nil || ps[0].ends != nil || ps[1].ends == nil {
		t.Fatalf("points %+v", ps)
	}
	r := ps[1].Rates
	// a: 20 in g1 and 10 in g2 over 10 s; b did not grow; c is new; s00..s11 grew 1..12, 0.1 to 1.2 a second.
	want := 3 + 0.1*float64((TopN+2)*(TopN+3)/2)
	if len(r) != TopN || r["a"] != 3 || r["b"] != 0 || r["c"] != 0 || r["s11"] != 1.2 || r["s01"] != 0 || r["s00"] != 0 ||
		ps[1].TotalRate < want-1e-9 || ps[1].TotalRate > want+1e-9 {
		t.Errorf("rates %v, total %v (want %v)", r, ps[1].TotalRate, want)
	}
}

package console

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/limits"
)

// Live charts: while a console was opened in the last HistoryIdle, a
// sampler takes, every HistoryEvery, each broker group's backlog (from
// the metaserver's heartbeats), the lag of the TopN consumer groups that
// owe most, and the send rates of the TopN subjects that take most (from
// the growth of their consume logs since the last sample: subjects with a
// consumer group), into a ring of HistoryPoints points. Nobody looking,
// nothing sampled. The lag of a consumer group whose page was opened is
// sampled too, from the same call, for the WatchedGroups whose pages were
// opened last, whatever they owe: a group's chart starts when its page
// was first opened.
const (
	HistoryPoints = 360
	HistoryEvery  = 10 * time.Second
	HistoryIdle   = 10 * time.Minute
	TopN          = 10
	WatchedGroups = 32
	// FirstLookWait bounds how long a first look waits for the sampler's
	// first point: a sample asks every broker group for every consumer
	// group, 160–470 ms at 10,000 groups and once 2.4 s under load, and
	// a page waiting for it is a page not shown. Past it the look answers
	// with no points, and the charts fill in from the next look.
	FirstLookWait = 500 * time.Millisecond
	// wakeGap is the least time between the start of one sample and the
	// next when looks by other applications wake the sampler: two taking
	// turns must not keep it sampling back to back.
	wakeGap = time.Second
)

// Point is one sample.
type Point struct {
	At           time.Time        `json:"at"`
	BrokerGroups map[string]int64 `json:"broker_groups"`   // backlog by broker group
	Groups       map[string]int64 `json:"consumer_groups"` // lag by "subject/group", the TopN
	// Watched is the lag by "subject/group" of the WatchedGroups whose
	// pages were opened last (absent: none).
	Watched  map[string]int64 `json:"watched,omitempty"`
	TotalLag int64            `json:"total_lag"`
	// Rates are messages a second appended since the last sample, of the
	// TopN subjects that took most; TotalRate of every subject with a
	// consumer group. Both absent from a ring's first point.
	Rates     map[string]float64 `json:"rates,omitempty"`
	TotalRate float64            `json:"total_rate"`
	ends      map[string]int64   // "subject\x00broker group" → its consume log's end
}

type history struct {
	h        *handler
	mu       sync.Mutex
	ring     []Point
	next     int
	full     bool
	lastView time.Time
	running  bool
	code     string // the application of the latest viewer, sampled as; the ring holds only its samples
	secret   string
	watched  []string      // "subject/group" of the WatchedGroups pages opened last, the latest last
	added    chan struct{} // closed, and made anew, by each point added
	wake     chan struct{} // the sampler samples at once, not after its pause
	wait     time.Duration // a first look's: FirstLookWait
}

func newHistory(h *handler) *history {
	return &history{h: h, ring: make([]Point, HistoryPoints), added: make(chan struct{}), wake: make(chan struct{}, 1),
		wait: FirstLookWait}
}

// look notes c looking, at the page of the consumer group key
// ("subject/group") unless it is empty, and starts the sampler if it is
// not running.
func (s *history) look(c caller, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastView = s.h.now()
	if c.code != s.code || c.secret != s.secret {
		// Another application looks: what was sampled with the rights of
		// the last is not shown to it.
		clear(s.ring)
		s.next, s.full = 0, false
		s.watched = nil
		select { // its first point now, not after the sampler's pause
		case s.wake <- struct{}{}:
		default:
		}
	}
	s.code, s.secret = c.code, c.secret
	if key != "" {
		if i := slices.Index(s.watched, key); i >= 0 {
			s.watched = slices.Delete(s.watched, i, i+1)
		} else if len(s.watched) == WatchedGroups {
			s.watched = slices.Delete(s.watched, 0, 1)
		}
		s.watched = append(s.watched, key)
	}
	if !s.running {
		s.running = true
		go s.run()
	}
}

func (s *history) run() {
	for {
		s.mu.Lock()
		if s.h.now().Sub(s.lastView) > HistoryIdle {
			s.running = false
			s.mu.Unlock()
			return
		}
		code, secret, watched := s.code, s.secret, slices.Clone(s.watched)
		select { // a wake before now is answered by this sample
		case <-s.wake:
		default:
		}
		s.mu.Unlock()
		started := time.Now()
		if a, err := s.h.clients.get(code, secret); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), HistoryEvery)
			if p, err := sample(ctx, a, s.h.now(), watched); err == nil {
				s.addAs(p, code, secret)
			} else {
				s.h.log.Debug("console: history sample", "error", err)
			}
			cancel()
		}
		pause := time.NewTimer(time.Until(started.Add(HistoryEvery)))
		gap := time.NewTimer(time.Until(started.Add(wakeGap)))
		select {
		case <-pause.C:
		case <-gap.C:
			select {
			case <-pause.C:
			case <-s.wake:
			}
		}
		pause.Stop()
		gap.Stop()
	}
}

// firstPoint waits, at most FirstLookWait or until ctx ends, for a point
// c may see, and returns the points it may.
func (s *history) firstPoint(ctx context.Context, c caller) []Point {
	timer := time.NewTimer(s.wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		added := s.added
		s.mu.Unlock()
		if ps := s.pointsOf(c); len(ps) > 0 {
			return ps
		}
		select {
		case <-added:
		case <-timer.C:
			return s.pointsOf(c)
		case <-ctx.Done():
			return s.pointsOf(c)
		}
	}
}

// addAs adds p, sampled as the application code, unless another looked since.
func (s *history) addAs(p Point, code, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.code == code && s.secret == secret {
		s.put(p)
	}
}

// withRates sets p's rates from the growth of its ends since prev's.
func withRates(p *Point, prev *Point) {
	if prev == nil || prev.ends == nil || !p.At.After(prev.At) {
		return
	}
	dt := p.At.Sub(prev.At).Seconds()
	bySubject := map[string]float64{}
	for k, end := range p.ends {
		if was, ok := prev.ends[k]; ok && end > was {
			subject, _, _ := strings.Cut(k, "\x00")
			bySubject[subject] += float64(end-was) / dt
		}
	}
	type rate struct {
		subject string
		r       float64
	}
	var rs []rate
	for sub, r := range bySubject {
		p.TotalRate += r
		rs = append(rs, rate{sub, r})
	}
	slices.SortFunc(rs, func(x, y rate) int {
		if c := cmp.Compare(y.r, x.r); c != 0 {
			return c
		}
		return strings.Compare(x.subject, y.subject)
	})
	p.Rates = map[string]float64{}
	for _, r := range rs[:min(len(rs), TopN)] {
		p.Rates[r.subject] = r.r
	}
}

func (s *history) add(p Point) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(p)
}

func (s *history) put(p Point) {
	if prev := (s.next + len(s.ring) - 1) % len(s.ring); s.full || s.next > 0 {
		withRates(&p, &s.ring[prev])
		s.ring[prev].ends = nil // only the newest point keeps its ends
	}
	s.ring[s.next] = p
	s.next = (s.next + 1) % len(s.ring)
	s.full = s.full || s.next == 0
	close(s.added)
	s.added = make(chan struct{})
}

// points returns the ring, oldest first.
func (s *history) points() []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pointsLocked()
}

// pointsOf is points for caller c: none unless c is the application the
// ring was sampled as (another may have looked since c did).
func (s *history) pointsOf(c caller) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.code != s.code || c.secret != s.secret {
		return []Point{}
	}
	return s.pointsLocked()
}

func (s *history) pointsLocked() []Point {
	if !s.full {
		return slices.Clone(s.ring[:s.next])
	}
	return append(slices.Clone(s.ring[s.next:]), s.ring[:s.next]...)
}

// sample takes one point: backlogs from one Cluster call, lags from one
// call per broker group, of the TopN that owe most and of watched.
func sample(ctx context.Context, a *admin.Client, now time.Time, watched []string) (Point, error) {
	p := Point{At: now, BrokerGroups: map[string]int64{}, Groups: map[string]int64{}, ends: map[string]int64{}}
	watching := map[string]bool{}
	for _, key := range watched {
		watching[key] = true
	}
	c, err := a.Cluster(ctx)
	if err != nil {
		return p, err
	}
	for _, g := range c.BrokerGroups {
		var b int64
		for _, n := range g.Nodes {
			if n.ID == g.Leader || b == 0 {
				b = n.Backlog
			}
		}
		p.BrokerGroups[g.Name] = b
	}
	vs, _ := a.ConsumerGroups(ctx, "")
	slices.SortFunc(vs, func(x, y admin.ConsumerGroupView) int { return cmp.Compare(y.Total.Lag, x.Total.Lag) })
	for i, v := range vs {
		for _, g := range v.BrokerGroups {
			p.ends[v.Subject+"\x00"+g.BrokerGroup] = g.End
		}
		p.TotalLag += v.Total.Lag
		key := v.Subject + "/" + v.Group
		if i < TopN {
			p.Groups[key] = v.Total.Lag
		}
		if watching[key] {
			if p.Watched == nil {
				p.Watched = map[string]int64{}
			}
			p.Watched[key] = v.Total.Lag
		}
	}
	return p, nil
}

// historyGet answers GET /api/v1/history, the ring; with ?subject=&group=
// (both or neither), a consumer group's page looking, whose lag is
// sampled from then on.
func (h *handler) historyGet(r *http.Request, c caller, _ *admin.Client) (any, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badf("the query: %.100s", err.Error())
	}
	key, err := watchedKey(q)
	if err != nil {
		return nil, err
	}
	h.history.look(c, key)
	// The sampler, started by the first look, samples at once; the first
	// look waits a while for its point.
	points := h.history.firstPoint(r.Context(), c)
	return map[string]any{"every": HistoryEvery.String(), "points": points}, nil
}

// watchedKey reads the consumer group of a history request: "" if none,
// else "subject/group" (names hold no '/').
func watchedKey(q url.Values) (string, error) {
	for k, vs := range q {
		if k != "subject" && k != "group" {
			return "", badf("unknown parameter %.40q: the history takes subject and group", k)
		}
		if len(vs) != 1 {
			return "", badf("parameter %s given %d times", k, len(vs))
		}
	}
	if !q.Has("subject") && !q.Has("group") {
		return "", nil
	}
	subject, group := q.Get("subject"), q.Get("group")
	if err := limits.CheckName("subject", subject); err != nil {
		return "", badRequest{err.Error()}
	}
	if err := limits.CheckName("consumer group", group); err != nil {
		return "", badRequest{err.Error()}
	}
	return subject + "/" + group, nil
}

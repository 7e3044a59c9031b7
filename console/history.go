package console

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/qmqgo/qmq/admin"
)

// Live charts: while a console was opened in the last HistoryIdle, a
// sampler takes, every HistoryEvery, each broker group's backlog (from
// the metaserver's heartbeats), the lag of the TopN consumer groups that
// owe most, and the send rates of the TopN subjects that take most (from
// the growth of their consume logs since the last sample: subjects with a
// consumer group), into a ring of HistoryPoints points. Nobody looking,
// nothing sampled.
const (
	HistoryPoints = 360
	HistoryEvery  = 10 * time.Second
	HistoryIdle   = 10 * time.Minute
	TopN          = 10
)

// Point is one sample.
type Point struct {
	At           time.Time        `json:"at"`
	BrokerGroups map[string]int64 `json:"broker_groups"`   // backlog by broker group
	Groups       map[string]int64 `json:"consumer_groups"` // lag by "subject/group", the TopN
	TotalLag     int64            `json:"total_lag"`
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
}

func newHistory(h *handler) *history { return &history{h: h, ring: make([]Point, HistoryPoints)} }

// look notes c looking, and starts the sampler if it is not running.
func (s *history) look(c caller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastView = s.h.now()
	if c.code != s.code || c.secret != s.secret {
		// Another application looks: what was sampled with the rights of
		// the last is not shown to it.
		clear(s.ring)
		s.next, s.full = 0, false
	}
	s.code, s.secret = c.code, c.secret
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
		code, secret := s.code, s.secret
		s.mu.Unlock()
		if a, err := s.h.clients.get(code, secret); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), HistoryEvery)
			if p, err := sample(ctx, a, s.h.now()); err == nil {
				s.addAs(p, code, secret)
			} else {
				s.h.log.Debug("console: history sample", "error", err)
			}
			cancel()
		}
		time.Sleep(HistoryEvery)
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
// call per broker group.
func sample(ctx context.Context, a *admin.Client, now time.Time) (Point, error) {
	p := Point{At: now, BrokerGroups: map[string]int64{}, Groups: map[string]int64{}, ends: map[string]int64{}}
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
		if i < TopN {
			p.Groups[v.Subject+"/"+v.Group] = v.Total.Lag
		}
	}
	return p, nil
}

func (h *handler) historyGet(r *http.Request, c caller, a *admin.Client) (any, error) {
	h.history.look(c)
	if len(h.history.pointsOf(c)) == 0 { // the first look: a point at once
		if p, err := sample(r.Context(), a, h.now()); err == nil {
			h.history.addAs(p, c.code, c.secret)
		}
	}
	return map[string]any{"every": HistoryEvery.String(), "points": h.history.pointsOf(c)}, nil
}

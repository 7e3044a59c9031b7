package qmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmqgo/qmq/transport"
)

// routeTTL is how long a route is used before it is asked for again; a
// failure refreshes it sooner.
const routeTTL = 30 * time.Second

// staleRefresh bounds asking for a route already cached: a metaserver that
// does not answer must not hold sends and pulls, which go to the brokers.
const staleRefresh = 2 * time.Second

// router finds where subjects live. It asks the metaserver (or any broker
// node, which asks the metaserver), caches the answers, and keeps one
// client per broker group.
type router struct {
	dial transport.Dialer
	meta *transport.LeaderClient
	ttl  time.Duration // routeTTL; tests shorten it

	mu     sync.Mutex
	routes map[string]*route
	groups map[string]*transport.LeaderClient
}

// route is a cached answer.
type route struct {
	transport.Route
	fetched time.Time     // guarded by router.mu once cached
	next    atomic.Uint32 // round robin over writable groups
}

// newRouter returns a router that asks the nodes at servers, and connects
// to them and to every broker group with d.
func newRouter(servers string, d transport.Dialer) (*router, error) {
	meta, err := d.NewLeaderClient(transport.SplitServers(servers))
	if err != nil {
		return nil, err
	}
	return &router{dial: d, meta: meta, ttl: routeTTL, routes: map[string]*route{}, groups: map[string]*transport.LeaderClient{}}, nil
}

// setTTL sets how long routes are used before they are asked for again.
func (r *router) setTTL(d time.Duration) {
	r.mu.Lock()
	r.ttl = d
	r.mu.Unlock()
}

// lookup returns subject's route, from the cache while it is fresh.
// consumerGroup, if set, is recorded as a consumer of the subject on the
// first fetch.
func (r *router) lookup(ctx context.Context, subject, consumerGroup string) (*route, error) {
	r.mu.Lock()
	rt := r.routes[subject]
	fresh := rt != nil && time.Since(rt.fetched) < r.ttl
	r.mu.Unlock()
	if fresh {
		return rt, nil
	}
	if rt == nil {
		return r.refresh(ctx, subject, consumerGroup)
	}
	return r.refreshStale(ctx, rt, consumerGroup), nil
}

// maxParallelLookups bounds the route requests prefetch has in flight.
const maxParallelLookups = 32

// prefetch looks up, maxParallelLookups at a time, the routes of subjects
// not fresh in the cache, so that a batch over many new subjects waits
// for a few round trips instead of one per subject (10,000 new subjects
// took seconds one after another). Failures are left to lookup to report.
func (r *router) prefetch(ctx context.Context, subjects iter.Seq[string]) {
	var need []string
	seen := map[string]bool{}
	r.mu.Lock()
	for subject := range subjects {
		if rt := r.routes[subject]; (rt == nil || time.Since(rt.fetched) >= r.ttl) && !seen[subject] {
			seen[subject] = true
			need = append(need, subject)
		}
	}
	r.mu.Unlock()
	if len(need) < 2 {
		return
	}
	slots := make(chan struct{}, maxParallelLookups)
	var wg sync.WaitGroup
	for _, subject := range need {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			r.lookup(ctx, subject, "")
		})
	}
	wg.Wait()
}

// refreshStale asks for a cached route again, briefly; if the metaserver
// does not answer, it keeps using the cached route (the brokers may well be
// reachable, and where a subject lives rarely changes) and asks again in a
// few seconds.
func (r *router) refreshStale(ctx context.Context, rt *route, consumerGroup string) *route {
	ctx, cancel := context.WithTimeout(ctx, staleRefresh)
	defer cancel()
	fresh, err := r.refresh(ctx, rt.Subject, consumerGroup)
	if err != nil {
		r.mu.Lock()
		rt.fetched = time.Now().Add(5*time.Second - r.ttl)
		r.mu.Unlock()
		return rt
	}
	return fresh
}

// refresh asks for subject's route again.
func (r *router) refresh(ctx context.Context, subject, consumerGroup string) (*route, error) {
	b, _ := json.Marshal(transport.RouteRequest{Subject: subject, ConsumerGroup: consumerGroup})
	body, err := r.meta.Call(ctx, transport.TypeRoute, b)
	if err != nil {
		return nil, fmt.Errorf("qmq: route of %s: %w", subject, err)
	}
	rt := &route{fetched: time.Now()}
	if err := json.Unmarshal(body, &rt.Route); err != nil {
		return nil, fmt.Errorf("qmq: route of %s: %w", subject, err)
	}
	// A group with no node to reach (all left it) cannot be used: drop it.
	reachable := rt.BrokerGroups[:0]
	for _, g := range rt.BrokerGroups {
		if len(g.Servers) > 0 {
			reachable = append(reachable, g)
		}
	}
	rt.BrokerGroups = reachable
	if len(rt.BrokerGroups) == 0 {
		return nil, fmt.Errorf("qmq: route of %s names no reachable broker group", subject)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range rt.BrokerGroups {
		if c := r.groups[g.Name]; c != nil {
			c.SetServers(g.Servers, g.Leader)
			continue
		}
		c, err := r.dial.NewLeaderClient(g.Servers)
		if err != nil {
			return nil, fmt.Errorf("qmq: route of %s: group %s: %w", subject, g.Name, err)
		}
		c.KeepTrying() // a route's group that is down comes back: wait for it
		c.SetServers(g.Servers, g.Leader)
		r.groups[g.Name] = c
	}
	if old := r.routes[subject]; old != nil {
		rt.next.Store(old.next.Load())
	}
	r.routes[subject] = rt
	return rt, nil
}

// group returns the client of a broker group the router has seen.
func (r *router) group(name string) *transport.LeaderClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.groups[name]
}

func (r *router) close() {
	r.meta.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.groups {
		c.Close()
	}
}

// pick chooses the broker group to send to: writable groups in turn,
// preferring available ones and those not in avoid (groups that just
// failed). It returns "" when no group is writable.
func (rt *route) pick(avoid map[string]bool) string {
	best := rt.candidates(avoid)
	if len(best) == 0 {
		return ""
	}
	return best[rt.next.Add(1)%uint32(len(best))]
}

// pickFor chooses the broker group for a message whose id its producer
// chose, by rendezvous hashing: of the groups not in avoid, the one whose
// hash with the id is highest, among the available ones if any is. A send
// of the same id by another Producer, which sees the same route, goes to
// the same group, whose dedup window then stores it once; and a group
// joining or leaving moves only the ids it wins or won (a hash modulo the
// number of groups moved about half of every group's ids).
//
// A drained group is ranked too: it may hold the id from an earlier send,
// and its leader answers that as a duplicate, refusing only what it does
// not hold (then the send adds it to avoid and the next group is asked).
// It returns "" when no group of the route not in avoid is writable.
func (rt *route) pickFor(id string, avoid map[string]bool) string {
	writable := false
	for _, g := range rt.BrokerGroups {
		writable = writable || (g.Writable && !avoid[g.Name])
	}
	if !writable {
		return ""
	}
	var best string
	var top uint64
	for pass := 0; pass < 2 && best == ""; pass++ {
		for _, g := range rt.BrokerGroups {
			if avoid[g.Name] || (pass == 0 && !g.Available) {
				continue
			}
			if w := rendezvous(id, g.Name); best == "" || w > top {
				best, top = g.Name, w
			}
		}
	}
	return best
}

// rendezvous is the weight of broker group for id.
func rendezvous(id, group string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(group))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return mix64(h.Sum64())
}

// mix64 spreads FNV's weak low bits (a finalizer of SplitMix64), so that
// weights of one id for similar group names are independent.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// candidates returns the groups a send may go to, in the route's order:
// the writable, available ones not in avoid; failing that the writable
// ones not in avoid; failing that every writable one.
func (rt *route) candidates(avoid map[string]bool) []string {
	var best []string
	for pass := 0; pass < 3 && len(best) == 0; pass++ {
		for _, g := range rt.BrokerGroups {
			ok := g.Writable
			if pass == 0 {
				ok = ok && g.Available && !avoid[g.Name]
			} else if pass == 1 {
				ok = ok && !avoid[g.Name]
			}
			if ok {
				best = append(best, g.Name)
			}
		}
	}
	return best
}

// errNoWritableGroup means every broker group of a subject is drained.
var errNoWritableGroup = errors.New("qmq: every broker group of the subject is readonly")

package qmq

import (
	"context"
	"time"

	"github.com/qmqgo/qmq/transport"
)

// SetRouteTTL sets how long p keeps a route before asking again: tests
// make every route stale at once.
func SetRouteTTL(p *Producer, d time.Duration) { p.r.setTTL(d) }

// SetSubscriptionRouteTTL sets how long s keeps its subject's route
// before asking again: tests see a route change at once.
func SetSubscriptionRouteTTL(s *Subscription, d time.Duration) { s.p.r.setTTL(d) }

// BeforeRequest makes p run fn as each request to a broker group is about
// to be made.
func BeforeRequest(p *Producer, fn func(group string)) { p.beforeRequest = fn }

// SetCloseTimeout sets how long Close lets s drain: tests shorten it.
func SetCloseTimeout(s *Subscription, d time.Duration) { s.closeTimeout = d }

// Leaving reports whether s hands no more messages to its handlers (Stop,
// or a Drain that gave up, has begun).
func Leaving(s *Subscription) bool {
	select {
	case <-s.leave:
		return true
	default:
		return false
	}
}

// PickFor returns the broker group a message whose id its producer chose
// goes to, among groups, all writable and available.
func PickFor(id string, groups ...string) string {
	rt := &route{}
	for _, g := range groups {
		rt.BrokerGroups = append(rt.BrokerGroups, transport.BrokerGroupRoute{Name: g, Writable: true, Available: true})
	}
	return rt.pickFor(id, nil)
}

// WireProperties returns the properties p would send m with from ctx (the
// span's context added, or not), ending the span it starts.
func WireProperties(ctx context.Context, p *Producer, m *Message) (map[string]string, error) {
	sctx, span := p.startSend(ctx, m)
	w, err := p.check(m)
	if err == nil {
		p.inject(sctx, m, w)
	}
	span.end(m, err)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, kv := range w.Properties {
		out[kv.Key] = kv.Value
	}
	return out, nil
}

// TraceSkipped counts the sends of p that went without their span's
// context, the message being at a limit.
func TraceSkipped(p *Producer) int64 { return p.traceSkipped.Load() }

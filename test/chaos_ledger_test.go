package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
)

// The chaos run's messages with ids of their own, on routes that grow
// while they are sent. Each of ledgerSubjects is routed to one broker
// group when the run begins (alternately g1 and g2), and the route fault
// (Chaos.Narrow, chaos_routes.go) adds the other to one of them at a time,
// then makes the first unavailable at the metaserver for a moment. Two
// producers (chaos_test.go's send) send messages with ids of their own
// (Message.SetID), each id by one send of up to 60 s (within the broker
// groups' 2-minute dedup window): retried on a group that may have stored it, moved only when
// that group refuses it having looked (drained by the quiet restart, its
// disk full). The checker fails a run in which an id reached consumers
// from two broker groups (History.SendingChosen: one send stored twice).
//
// ledgerGroup consumes them from the start at the latest message (the
// default), subscribed before the first send, so it is owed every
// acknowledged one, those a widened route's new group stored before the
// group's first pull there included; latecomerGroup subscribes, at the
// latest message too, once sending is under way, between two faults, and
// is owed what was handed to a producer after its Subscribe returned.
var ledgerSubjects = []string{"ledger.eu", "ledger.us", "ledger.asia", "ledger.africa"}

const (
	ledgerGroup    = "ledger"
	latecomerGroup = "latecomer"
	ledgerTimeout  = time.Minute
)

// narrowRoutes routes each of ledgerSubjects to one of groups in turn,
// before anything is sent, and returns the routes for the route fault.
func narrowRoutes(t *testing.T, adm *admin.Client, groups []*Cluster) []NarrowRoute {
	var out []NarrowRoute
	for i, s := range ledgerSubjects {
		c := groups[i%len(groups)]
		err := Poll(30*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := adm.Assign(ctx, s, []string{c.Group}, 0)
			if err == nil && len(r.BrokerGroups) != 1 {
				err = fmt.Errorf("%s routed to %d broker groups, want 1", s, len(r.BrokerGroups))
			}
			return err
		})
		if err != nil {
			t.Fatalf("routing %s to %s: %v", s, c.Group, err)
		}
		out = append(out, NarrowRoute{Subject: s, On: c})
	}
	return out
}

// joinLatecomer subscribes latecomerGroup to every ledger subject at the
// latest message, between two faults (so that its registration reaches
// every broker group of the subject), once the first thousand sends are
// acknowledged, recording each subject's join when its Subscribe returns.
func joinLatecomer(t *testing.T, h *History, ch *Chaos, subscribe func(subject, group string, hd qmq.Handler, opts ...qmq.SubscribeOption) *qmq.Subscription) {
	if err := Poll(2*time.Minute, func() error {
		if n := h.AckedCount(); n < 1000 {
			return fmt.Errorf("%d sends acknowledged", n)
		}
		return nil
	}); err != nil {
		t.Errorf("%s: %v", latecomerGroup, err)
		return
	}
	ch.Between(func() {
		for _, s := range ledgerSubjects {
			sub := subscribe(s, latecomerGroup, func(_ context.Context, m *qmq.Message) error {
				h.Delivered(latecomerGroup, m, time.Now())
				return nil
			}, qmq.StartAt(qmq.Latest))
			if sub == nil {
				return
			}
			h.Joined(latecomerGroup, s, time.Now())
		}
		t.Logf("chaos: %s joined %v at the latest message", latecomerGroup, ledgerSubjects)
	})
}

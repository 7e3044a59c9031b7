package test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/qmqgo/qmq/admin"
)

// NarrowRoute is a subject routed to one broker group (On) when the run
// begins, which the route fault widens to another.
type NarrowRoute struct {
	Subject string
	On      *Cluster
}

// widenReady says whether a narrow route is left to widen.
func (ch *Chaos) widenReady() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.widened < len(ch.Narrow)
}

// pickWiden returns the broker group the route fault adds to the next
// narrow route (nil: no narrow route in this run).
func (ch *Chaos) pickWiden() *Cluster {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.Narrow) == 0 || ch.meta == nil {
		return nil
	}
	on := ch.Narrow[min(ch.widened, len(ch.Narrow)-1)].On
	for _, c := range ch.groups {
		if c != on {
			return c
		}
	}
	return nil
}

// widenRoute adds broker group c to the route of the next narrow route's
// subject (Chaos.Narrow), while producers send it messages with ids of
// their own and a consumer group at the latest message consumes it: the
// SDK's admin.Client sets the subject's consumer groups up in c at the earliest
// message, so what c stores before a group's first pull there reaches
// the group, and the producers' rendezvous hash moves about half the
// subject's ids to c (each still stored in one group). Then it makes the
// subject's first group unavailable (cut from the metaserver until the
// metaserver says so) and, for 6–8 s, loses its answers to clients: the
// sends it stores go unanswered past the 5 s after which a producer asks
// the metaserver whether the group is still alive, and is told no. The
// ids it would take go to c, and a send of one under way stays with it,
// for it may have stored the message: moved, it would be stored twice.
func (ch *Chaos) widenRoute(c *Cluster) string {
	ch.mu.Lock()
	r := ch.Narrow[ch.widened]
	ch.widened++
	ch.mu.Unlock()
	adm := ch.admin(c)
	defer adm.Close()
	err := Poll(30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rt, err := adm.Assign(ctx, r.Subject, []string{c.Group}, 0)
		if err == nil && !slices.ContainsFunc(rt.BrokerGroups, func(g admin.BrokerGroupRoute) bool { return g.Name == c.Group }) {
			err = fmt.Errorf("route of %s: %v", r.Subject, rt.BrokerGroups)
		}
		return err
	})
	if err != nil {
		ch.t.Fatalf("adding %s to the route of %s: %v", c.Group, r.Subject, err)
	}
	d := time.Duration(6000+ch.rng.IntN(2000)) * time.Millisecond
	took := ch.unavailable(adm, r.On, func() {
		ch.loseAnswers(r.On, true)
		sleepFor(d)
		ch.loseAnswers(r.On, false)
	})
	return fmt.Sprintf("added to the route of %s; then %s unavailable at the metaserver (cut from it for %s), its answers to clients lost for %s",
		r.Subject, r.On.Group, took.Round(100*time.Millisecond), d)
}

// loseAnswers makes every node of broker group c lose its answers to
// clients (not to other nodes), keeping the connections open; with lose
// false, answers go through again.
func (ch *Chaos) loseAnswers(c *Cluster, lose bool) {
	var drop func(string) bool
	if lose {
		nodes := map[string]bool{}
		for _, g := range append([]*Cluster{ch.meta}, ch.groups...) {
			for _, n := range g.Nodes() {
				nodes[n.IP] = true
			}
		}
		drop = func(src string) bool { return !nodes[src] }
	}
	for _, n := range c.Nodes() {
		n.ClientProxy.Drop(drop, false)
	}
}

// unavailable cuts every node of broker group c from the metaserver until
// the metaserver calls c unavailable, runs meanwhile, and restores it,
// waiting until c is available again; it returns how long c was cut.
func (ch *Chaos) unavailable(adm *admin.Client, c *Cluster, meanwhile func()) time.Duration {
	ch.t.Helper()
	at := time.Now()
	ch.cutFromMeta(c, true)
	ch.meta.WaitFor(30*time.Second, c.Group+" unavailable at the metaserver", availability(adm, false, c.Group))
	meanwhile()
	ch.cutFromMeta(c, false)
	took := time.Since(at)
	ch.meta.WaitFor(30*time.Second, c.Group+" available again at the metaserver", availability(adm, true, c.Group))
	return took
}

// availability returns a check that the metaserver (asked through admin)
// calls each of the broker groups names available (and led), or with
// available false unavailable.
func availability(adm *admin.Client, available bool, names ...string) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl, err := adm.Cluster(ctx)
		if err != nil {
			return err
		}
		for _, name := range names {
			i := slices.IndexFunc(cl.BrokerGroups, func(g admin.BrokerGroupStatus) bool { return g.Name == name })
			if i < 0 || cl.BrokerGroups[i].Available != available || (available && cl.BrokerGroups[i].Leader == "") {
				return fmt.Errorf("broker group %s: available %t, want %t: %+v", name, !available, available, cl.BrokerGroups)
			}
		}
		return nil
	}
}

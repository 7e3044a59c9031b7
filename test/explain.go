package test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/qmqgo/qmq/admin"
)

// explainMost is how many findings of each kind explain looks up.
const explainMost = 3

// explain logs, for the first sends of each kind a failed check names,
// what the cluster itself recorded of them while it still runs: where
// each copy is stored and its timeline (sent, fired, and the named
// consumer group's hand-outs, acks, nacks, expiries and reclaims, each
// with its leader's time and Raft index), and when the test's handlers
// took them, so that a finding comes with its story.
func explain(v *verdict, h *History, adm *admin.Client, r Report) {
	var named []string
	for _, list := range [][]string{r.Lost, r.Split, r.Twice, r.Unexpected, r.Early, r.Incomplete, r.Expired} {
		named = append(named, list[:min(len(list), explainMost)]...)
	}
	for _, f := range named {
		group, rest, _ := strings.Cut(f, ":")
		id, _, _ := strings.Cut(rest, " ")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		found, err := adm.FindMessage(ctx, id, false, admin.WithTimeline())
		cancel()
		var b strings.Builder
		fmt.Fprintf(&b, "what the cluster recorded of %s", f)
		if delivered, nacked := h.seen(group, id); len(delivered)+len(nacked) > 0 {
			fmt.Fprintf(&b, "; its handlers took it at %s, failed it at %s", clocks(delivered), clocks(nacked))
		}
		if err != nil {
			fmt.Fprintf(&b, ": the lookup failed: %v", err)
		}
		if len(found) == 0 && err == nil {
			b.WriteString(": no copy retained")
		}
		for _, m := range found {
			fmt.Fprintf(&b, "\n  %s seq %d, appended %s (Raft index %d)", m.BrokerGroup, m.Seq, m.AppendedAt.Format("15:04:05.000"), m.RaftIndex)
			if m.TimelineError != "" {
				fmt.Fprintf(&b, "; timeline: %s", m.TimelineError)
			}
			for _, e := range m.Timeline {
				if e.ConsumerGroup != "" && e.ConsumerGroup != group {
					continue
				}
				fmt.Fprintf(&b, "\n    %s %-13s %s %s", e.At.Format("15:04:05.000"), e.Kind, e.Consumer, eventNote(e))
			}
		}
		v.Logf("%s", b.String())
	}
}

// eventNote is what an event says besides its time, kind and consumer.
func eventNote(e admin.Event) string {
	var parts []string
	if e.Delivery > 0 {
		parts = append(parts, fmt.Sprintf("delivery %d", e.Delivery))
	}
	if !e.Due.IsZero() {
		parts = append(parts, "due "+e.Due.Format("15:04:05.000"))
	}
	parts = append(parts, fmt.Sprintf("index %d", e.RaftIndex))
	return strings.Join(parts, ", ")
}

// clocks is times as the events show them.
func clocks(ts []time.Time) string {
	if len(ts) == 0 {
		return "none"
	}
	var out []string
	for _, t := range ts {
		out = append(out, t.Format("15:04:05.000"))
	}
	return strings.Join(out, ", ")
}

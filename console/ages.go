package console

import (
	"context"
	"net/http"
	"time"

	"github.com/qmqgo/qmq/admin"
)

// Ages: how old a consumer group's backlog is and how far back a subject
// is retained, read from the stored messages (never consumed): in each
// broker group, the message at the group's cursor (the oldest it has not
// handed out) and the first retained one. Each is one bounded listing of
// one message.

// ageBudget bounds the consume-log entries one age reads: a message
// removed by retention or skipped by a filter costs one.
const ageBudget = 1000

// BrokerGroupAge is one broker group's ages for a consumer group.
type BrokerGroupAge struct {
	BrokerGroup string `json:"broker_group"`
	// OldestPendingAt is when the oldest message the group has not handed
	// out was appended (zero: it has none); its age is the backlog's.
	OldestPendingSeq       int64     `json:"oldest_pending_seq,omitempty"`
	OldestPendingAt        time.Time `json:"oldest_pending_at,omitzero"`
	OldestPendingAgeMillis int64     `json:"oldest_pending_age_ms,omitempty"`
	// RetainedSince is when the first message the broker group still
	// retains of the subject was appended: its retention horizon (zero:
	// it retains none).
	RetainedSince time.Time `json:"retained_since,omitzero"`
	Error         string    `json:"error,omitempty"`
}

// ConsumerGroupPage answers GET .../consumer-groups/{group}: the view
// admin.ConsumerGroup returns, with each broker group's ages.
type ConsumerGroupPage struct {
	*admin.ConsumerGroupView
	Ages []BrokerGroupAge `json:"ages"`
}

// firstFrom is the sequence of the first retained message of subject in
// brokerGroup from sequence seq, and when it was appended; zero if there
// is none.
func firstFrom(ctx context.Context, a *admin.Client, subject, brokerGroup string, seq int64) (int64, time.Time, error) {
	pages, err := a.Messages(ctx, admin.MessageQuery{Subject: subject, BrokerGroup: brokerGroup, FromSeq: &seq, Limit: 1, Budget: ageBudget})
	if err != nil {
		return 0, time.Time{}, err
	}
	for _, p := range pages {
		if len(p.Messages) > 0 {
			return p.Messages[0].Seq, p.Messages[0].AppendedAt, nil
		}
	}
	return 0, time.Time{}, nil
}

// ages reads v's ages in each of its broker groups.
func ages(ctx context.Context, a *admin.Client, v *admin.ConsumerGroupView, now time.Time) []BrokerGroupAge {
	out := []BrokerGroupAge{}
	for _, g := range v.BrokerGroups {
		ga := BrokerGroupAge{BrokerGroup: g.BrokerGroup}
		var err error
		if g.Backlog > 0 {
			if ga.OldestPendingSeq, ga.OldestPendingAt, err = firstFrom(ctx, a, v.Subject, g.BrokerGroup, g.Cursor); err == nil && !ga.OldestPendingAt.IsZero() {
				ga.OldestPendingAgeMillis = max(0, now.Sub(ga.OldestPendingAt).Milliseconds())
			}
		}
		if err == nil {
			_, ga.RetainedSince, err = firstFrom(ctx, a, v.Subject, g.BrokerGroup, 0)
		}
		if err != nil {
			ga.Error = err.Error()
		}
		out = append(out, ga)
	}
	return out
}

// RateWindow is the window a subject's rate is counted over: in each
// broker group, from the consume sequence of the first message appended
// in it (one listing of one message, without body) to the consume log's
// end that listing reports, so that it is exact at any rate without
// reading the messages between.
const RateWindow = time.Minute

// SubjectView answers GET /api/v1/subjects/{subject}: its route, and in
// each of its broker groups its rate and retention horizon; LastWindow
// and PerSecond are the sums over the broker groups that answered.
type SubjectView struct {
	Route        *admin.Route       `json:"route"`
	BrokerGroups []SubjectGroupView `json:"broker_groups"`
	RateWindow   string             `json:"rate_window"`
	LastWindow   int64              `json:"last_window"`
	PerSecond    float64            `json:"per_second"`
}

// SubjectGroupView is a subject in one broker group.
type SubjectGroupView struct {
	BrokerGroup string `json:"broker_group"`
	Writable    bool   `json:"writable"`
	Available   bool   `json:"available"`
	// LastWindow is how many messages were appended in the last
	// RateWindow (retention may have removed some since).
	LastWindow int64   `json:"last_window"`
	PerSecond  float64 `json:"per_second"` // LastWindow over RateWindow
	// RetainedSince is when the first retained message was appended: the
	// retention horizon (zero: none retained).
	RetainedSince time.Time `json:"retained_since,omitzero"`
	Error         string    `json:"error,omitempty"`
}

// lastWindow is how many messages of subject brokerGroup appended from
// since on: its consume log's end less the first such message's sequence.
func lastWindow(ctx context.Context, a *admin.Client, subject, brokerGroup string, since time.Time) (int64, error) {
	pages, err := a.Messages(ctx, admin.MessageQuery{Subject: subject, BrokerGroup: brokerGroup, Since: since, Limit: 1, Budget: ageBudget})
	if err != nil || len(pages) != 1 || len(pages[0].Messages) == 0 {
		return 0, err
	}
	return max(0, pages[0].End-pages[0].Messages[0].Seq), nil
}

func (h *handler) subject(r *http.Request, c caller, a *admin.Client) (any, error) {
	subject, _, err := pathNames(r)
	if err != nil {
		return nil, err
	}
	if len(r.URL.Query()) > 0 {
		return nil, badf("a subject's view takes no parameter")
	}
	rt, err := a.Route(r.Context(), subject)
	if err != nil {
		return nil, err
	}
	now := h.now()
	v := SubjectView{Route: rt, BrokerGroups: []SubjectGroupView{}, RateWindow: RateWindow.String()}
	for _, g := range rt.BrokerGroups {
		sg := SubjectGroupView{BrokerGroup: g.Name, Writable: g.Writable, Available: g.Available}
		sg.LastWindow, err = lastWindow(r.Context(), a, subject, g.Name, now.Add(-RateWindow))
		if err == nil {
			sg.PerSecond = float64(sg.LastWindow) / RateWindow.Seconds()
			v.LastWindow += sg.LastWindow
			_, sg.RetainedSince, err = firstFrom(r.Context(), a, subject, g.Name, 0)
		}
		if err != nil {
			sg.Error = err.Error()
		}
		v.BrokerGroups = append(v.BrokerGroups, sg)
	}
	v.PerSecond = float64(v.LastWindow) / RateWindow.Seconds()
	return v, nil
}

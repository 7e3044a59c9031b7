package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/sdk"
	"github.com/qmqgo/qmq/transport"
)

// Consumer groups and their dead letters, for operators. Every broker group
// of a subject holds its own part of each consumer group (its cursor, its
// retries, its dead letters), so each method asks every broker group of the
// subject's route, through its leader, and gives the answers per broker
// group (and, where figures add up, summed).

// ConsumerGroupInfo is one consumer group in one broker group.
type ConsumerGroupInfo = transport.ConsumerGroupInfo

// ConsumerGroupSettings is how a consumer group consumes.
type ConsumerGroupSettings = transport.ConsumerGroupSettings

// DeadLetter is one dead letter of a consumer group in one broker group.
type DeadLetter = transport.DeadLetter

// DeadLetterPage is a broker group's page of a consumer group's dead
// letters; its Total counts every one that broker group keeps.
type DeadLetterPage = transport.DeadLetterPage

// ConsumerGroupView is a consumer group across the broker groups that
// hold it: each one's figures, and their sum.
type ConsumerGroupView struct {
	Subject      string              `json:"subject"`
	Group        string              `json:"group"`
	BrokerGroups []ConsumerGroupInfo `json:"broker_groups"`
	// Total adds up the broker groups' figures. Its Cursor and End are 0
	// (sequences are per broker group); Consumers is the most any broker
	// group has (a consumer registers in every one it pulls from); Settings
	// are the first broker group's.
	Total ConsumerGroupInfo `json:"total"`
	// SettingsDiffer says the broker groups do not all hold the same
	// settings (a change reached only some): set them again.
	SettingsDiffer bool `json:"settings_differ,omitempty"`
}

// newView sums infos, all of one consumer group.
func newView(infos []ConsumerGroupInfo) ConsumerGroupView {
	v := ConsumerGroupView{Subject: infos[0].Subject, Group: infos[0].ConsumerGroup, BrokerGroups: infos}
	t := &v.Total
	t.Subject, t.ConsumerGroup, t.Settings = v.Subject, v.Group, infos[0].Settings
	for _, g := range infos {
		t.Backlog += g.Backlog
		t.Redeliver += g.Redeliver
		t.Retrying += g.Retrying
		t.Unacked += g.Unacked
		t.Lag += g.Lag
		t.Consumers = max(t.Consumers, g.Consumers)
		t.DeadLetters += g.DeadLetters
		t.DeadDropped += g.DeadDropped
		t.Lost += g.Lost
		if g.Consumers == 0 && g.IdleSince.After(t.IdleSince) {
			t.IdleSince = g.IdleSince
		}
		v.SettingsDiffer = v.SettingsDiffer || g.Settings != t.Settings
	}
	if t.Consumers > 0 {
		t.IdleSince = time.Time{}
	}
	return v
}

// ConsumerGroups returns every consumer group of subject, or with subject
// "" every consumer group every broker group of the cluster holds, each
// with its figures per broker group and summed, ordered by subject and
// group. A broker group that does not answer is named in the error; the
// others' groups are returned all the same.
func (a *Client) ConsumerGroups(ctx context.Context, subject string) ([]ConsumerGroupView, error) {
	var brokers []BrokerGroupRoute
	if subject == "" {
		c, err := a.Cluster(ctx)
		if err != nil {
			return nil, err
		}
		for _, g := range c.BrokerGroups {
			r := BrokerGroupRoute{Name: g.Name}
			for _, n := range g.Nodes {
				r.Servers = append(r.Servers, n.ClientAddr)
				if n.ID == g.Leader {
					r.Leader = n.ClientAddr
				}
			}
			brokers = append(brokers, r)
		}
	} else {
		if err := limits.CheckName("subject", subject); err != nil {
			return nil, sdk.Error(fmt.Errorf("qmq: consumer groups: %w", err))
		}
		r, err := a.Route(ctx, subject)
		if err != nil {
			return nil, err
		}
		brokers = r.BrokerGroups
	}
	var all []ConsumerGroupInfo
	var errs []error
	for _, g := range brokers {
		var infos []ConsumerGroupInfo
		if err := a.brokerCall(ctx, g, transport.TypeConsumerGroups, transport.ConsumerGroupsRequest{Subject: subject}, &infos); err != nil {
			errs = append(errs, err)
			continue
		}
		all = append(all, infos...)
	}
	return views(all), errors.Join(errs...)
}

// views groups infos by subject and consumer group, in that order.
func views(infos []ConsumerGroupInfo) []ConsumerGroupView {
	slices.SortStableFunc(infos, func(x, y ConsumerGroupInfo) int {
		if x.Subject != y.Subject {
			return cmp.Compare(x.Subject, y.Subject)
		}
		return cmp.Compare(x.ConsumerGroup, y.ConsumerGroup)
	})
	var out []ConsumerGroupView
	for i := 0; i < len(infos); {
		j := i + 1
		for j < len(infos) && infos[j].Subject == infos[i].Subject && infos[j].ConsumerGroup == infos[i].ConsumerGroup {
			j++
		}
		out = append(out, newView(infos[i:j:j]))
		i = j
	}
	return out
}

// ConsumerGroup returns consumerGroup of subject in every broker group of
// the subject, and their sum. A consumer group no broker group knows is
// ErrNoConsumerGroup, said only when every broker group answered: with
// one that did not, the error names it, and the consumer group may be
// there.
func (a *Client) ConsumerGroup(ctx context.Context, subject, consumerGroup string) (*ConsumerGroupView, error) {
	r, err := a.subjectRoute(ctx, subject, consumerGroup, true)
	if err != nil {
		return nil, err
	}
	var infos []ConsumerGroupInfo
	var errs []error
	for _, g := range r.BrokerGroups {
		var got []ConsumerGroupInfo
		if err := a.brokerCall(ctx, g, transport.TypeConsumerGroups, transport.ConsumerGroupsRequest{Subject: subject, ConsumerGroup: consumerGroup}, &got); err != nil {
			errs = append(errs, err)
			continue
		}
		infos = append(infos, got...)
	}
	if len(infos) == 0 {
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		return nil, fmt.Errorf("%w: %s of %s", ErrNoConsumerGroup, consumerGroup, subject)
	}
	v := newView(infos)
	return &v, errors.Join(errs...)
}

// ConsumerGroupChanges are the settings SetConsumerGroup changes: nil
// fields stay as they are. Start and StartAt say where the group starts in
// a broker group that does not know it yet (it is created there).
type ConsumerGroupChanges struct {
	MaxDeliveries *uint32        // 1..10,000
	RetryFirst    *time.Duration // 0..RetryMax
	RetryMax      *time.Duration // at most two years
	AckWait       *time.Duration // 0 for none, or 1 s..7 days
	MaxInFlight   *uint32        // 0 for the broker's default, at most 100,000
	IdleExpiry    *time.Duration // 0 for never, or 1 s..two years
	Start         transport.StartPosition
	StartAt       time.Time // with transport.StartAtTime
}

// ConsumerGroupResult is what a change did in one broker group.
type ConsumerGroupResult struct {
	BrokerGroup string `json:"broker_group"`
	// Created says the broker group did not know the consumer group: it
	// was created there.
	Created bool `json:"created"`
}

// SetConsumerGroup changes consumerGroup's settings in every broker group
// of subject, creating it where it is not known (and the subject's
// route, for a subject not used yet: a group can be set up before anything
// is sent). The broker checks the settings' bounds; a refusal by one broker
// group stops before the next.
func (a *Client) SetConsumerGroup(ctx context.Context, subject, consumerGroup string, ch ConsumerGroupChanges) ([]ConsumerGroupResult, error) {
	req := transport.SetConsumerGroupRequest{Subject: subject, ConsumerGroup: consumerGroup, MaxDeliveries: ch.MaxDeliveries,
		RetryFirst: ch.RetryFirst, RetryMax: ch.RetryMax, AckWait: ch.AckWait, MaxInFlight: ch.MaxInFlight,
		IdleExpiry: ch.IdleExpiry, Start: ch.Start, StartAt: ch.StartAt}
	return a.changeGroup(ctx, subject, consumerGroup, transport.TypeSetConsumerGroup, req)
}

// ResetTarget is where ResetConsumerGroup moves a consumer group.
type ResetTarget struct {
	To transport.StartPosition
	At time.Time // with transport.StartAtTime
}

// Reset targets.
var (
	// ResetToEarliest moves a group to the oldest message each broker
	// group keeps: it is delivered everything again.
	ResetToEarliest = ResetTarget{To: transport.StartEarliest}
	// ResetToLatest moves a group past every message stored: it skips its
	// backlog and receives only what is sent from now on.
	ResetToLatest = ResetTarget{To: transport.StartLatest}
)

// ResetToTime moves a group to the first message stored at or after t.
func ResetToTime(t time.Time) ResetTarget { return ResetTarget{To: transport.StartAtTime, At: t} }

// ResetConsumerGroup moves consumerGroup's cursor in every broker group of
// subject (creating it where it is not known). Messages due again or
// waiting for a retry are dropped; those handed out and not finished stay
// with their consumers. Dead letters stay.
func (a *Client) ResetConsumerGroup(ctx context.Context, subject, consumerGroup string, to ResetTarget) ([]ConsumerGroupResult, error) {
	if to.To == transport.StartAtTime && to.At.Before(time.UnixMilli(0)) {
		return nil, fmt.Errorf("qmq: reset to %s: before 1970", to.At.Format(time.RFC3339))
	}
	req := transport.ResetConsumerGroupRequest{Subject: subject, ConsumerGroup: consumerGroup, To: to.To, At: to.At}
	return a.changeGroup(ctx, subject, consumerGroup, transport.TypeResetConsumerGroup, req)
}

// changeGroup sends a set or reset to every broker group of the subject.
func (a *Client) changeGroup(ctx context.Context, subject, consumerGroup string, t transport.Type, req any) ([]ConsumerGroupResult, error) {
	r, err := a.subjectRoute(ctx, subject, consumerGroup, false)
	if err != nil {
		return nil, err
	}
	var out []ConsumerGroupResult
	for _, g := range r.BrokerGroups {
		var res transport.ConsumerGroupResult
		if err := a.brokerCall(ctx, g, t, req, &res); err != nil {
			return out, err
		}
		out = append(out, ConsumerGroupResult{BrokerGroup: g.Name, Created: res.Created})
	}
	return out, nil
}

// ConsumerGroupForgetResult is what forgetting a consumer group removed
// from one broker group: whether it knew the group, and the consumers and
// unacknowledged messages it dropped.
type ConsumerGroupForgetResult struct {
	BrokerGroup string
	transport.ForgetConsumerGroupResult
}

// ForgetConsumerGroup removes consumerGroup of subject from the state of
// every broker group of the subject: its position, its queue of messages
// to deliver again, and its consumers with what they held unacknowledged.
// For a group that is gone for good; if it consumes again it starts
// afresh, where its first pull asks (the latest message by default).
func (a *Client) ForgetConsumerGroup(ctx context.Context, subject, consumerGroup string) ([]ConsumerGroupForgetResult, error) {
	r, err := a.Route(ctx, subject)
	if err != nil {
		return nil, err
	}
	req := transport.ForgetConsumerGroupRequest{Subject: subject, ConsumerGroup: consumerGroup}
	var out []ConsumerGroupForgetResult
	for _, g := range r.BrokerGroups {
		res := ConsumerGroupForgetResult{BrokerGroup: g.Name}
		if err := a.brokerCall(ctx, g, transport.TypeForgetConsumerGroup, req, &res.ForgetConsumerGroupResult); err != nil {
			return out, err
		}
		out = append(out, res)
	}
	if err := a.call(ctx, transport.TypeMetaForgetConsumerGroup, transport.ForgetConsumerGroupRequest{Subject: subject, ConsumerGroup: consumerGroup}, nil); err != nil {
		return out, fmt.Errorf("qmq: forget %s of %s in the metaserver: %w", consumerGroup, subject, err)
	}
	return out, nil
}

// DeadLetters lists consumerGroup's dead letters in every broker group of
// subject: from the offset-th, at most limit of each (the broker answers
// at most 1,000; limit <= 0 asks for as many), oldest first. A broker
// group that does not answer is named in the error; the others' pages are
// returned.
func (a *Client) DeadLetters(ctx context.Context, subject, consumerGroup string, offset, limit int) ([]DeadLetterPage, error) {
	if offset < 0 {
		return nil, fmt.Errorf("qmq: dead letters from offset %d (at least 0)", offset)
	}
	r, err := a.subjectRoute(ctx, subject, consumerGroup, true)
	if err != nil {
		return nil, err
	}
	req := transport.DeadLettersRequest{Subject: subject, ConsumerGroup: consumerGroup, Offset: offset, Limit: max(limit, 0)}
	var out []DeadLetterPage
	var errs []error
	for _, g := range r.BrokerGroups {
		var page DeadLetterPage
		if err := a.brokerCall(ctx, g, transport.TypeDeadLetters, req, &page); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, page)
	}
	return out, errors.Join(errs...)
}

// DeadLetter reads one dead letter whole (its properties and body too):
// seq, in brokerGroup (dead-letter sequences are per broker group). One
// the broker group does not keep is ErrNoDeadLetter.
func (a *Client) DeadLetter(ctx context.Context, subject, consumerGroup, brokerGroup string, seq int64) (*DeadLetter, error) {
	if seq < 0 {
		return nil, fmt.Errorf("qmq: dead letter %d: sequences are at least 0", seq)
	}
	r, err := a.subjectRoute(ctx, subject, consumerGroup, true)
	if err != nil {
		return nil, err
	}
	g, err := brokerOf(r, brokerGroup)
	if err != nil {
		return nil, err
	}
	var page DeadLetterPage
	if err := a.brokerCall(ctx, g, transport.TypeDeadLetters, transport.DeadLettersRequest{Subject: subject, ConsumerGroup: consumerGroup, Seq: &seq}, &page); err != nil {
		return nil, err
	}
	if len(page.Letters) == 0 {
		return nil, fmt.Errorf("%w: %d of %s of %s in broker group %s", ErrNoDeadLetter, seq, consumerGroup, subject, brokerGroup)
	}
	return &page.Letters[0], nil
}

// DeadLetterSelection names dead letters: All of them in every broker
// group, or Seqs of BrokerGroup (dead-letter sequences are per broker
// group).
type DeadLetterSelection struct {
	All         bool
	BrokerGroup string
	Seqs        []int64
}

func (s DeadLetterSelection) check() error {
	switch {
	case s.All && (s.BrokerGroup != "" || len(s.Seqs) > 0):
		return errors.New("qmq: dead letters: all, or sequences of one broker group, not both")
	case !s.All && (s.BrokerGroup == "" || len(s.Seqs) == 0):
		return errors.New("qmq: dead letters: name a broker group and its sequences, or all")
	}
	for _, seq := range s.Seqs {
		if seq < 0 {
			return fmt.Errorf("qmq: dead letter %d: sequences are at least 0", seq)
		}
	}
	return nil
}

// DeadLetterResult is what a resend or purge did in one broker group.
type DeadLetterResult struct {
	BrokerGroup string `json:"broker_group"`
	Done        int    `json:"done"` // dead letters resent or purged (those not kept are skipped)
}

// ResendDeadLetters gives the selected dead letters back to their consumer
// group, each with its delivery count afresh.
func (a *Client) ResendDeadLetters(ctx context.Context, subject, consumerGroup string, sel DeadLetterSelection) ([]DeadLetterResult, error) {
	return a.deadLetterOp(ctx, subject, consumerGroup, transport.DeadLetterResend, sel)
}

// PurgeDeadLetters forgets the selected dead letters for good.
func (a *Client) PurgeDeadLetters(ctx context.Context, subject, consumerGroup string, sel DeadLetterSelection) ([]DeadLetterResult, error) {
	return a.deadLetterOp(ctx, subject, consumerGroup, transport.DeadLetterPurge, sel)
}

func (a *Client) deadLetterOp(ctx context.Context, subject, consumerGroup string, op transport.DeadLetterOp, sel DeadLetterSelection) ([]DeadLetterResult, error) {
	if err := sel.check(); err != nil {
		return nil, err
	}
	r, err := a.subjectRoute(ctx, subject, consumerGroup, true)
	if err != nil {
		return nil, err
	}
	brokers := r.BrokerGroups
	if !sel.All {
		g, err := brokerOf(r, sel.BrokerGroup)
		if err != nil {
			return nil, err
		}
		brokers = []BrokerGroupRoute{g}
	}
	req := transport.DeadLetterOpRequest{Subject: subject, ConsumerGroup: consumerGroup, Op: op, All: sel.All, Seqs: sel.Seqs}
	var out []DeadLetterResult
	for _, g := range brokers {
		var res transport.DeadLetterOpResult
		if err := a.brokerCall(ctx, g, transport.TypeDeadLetterOp, req, &res); err != nil {
			return out, err
		}
		out = append(out, DeadLetterResult{BrokerGroup: g.Name, Done: res.Done})
	}
	return out, nil
}

// subjectRoute checks the names and returns subject's route: looked up
// only (lookup), or created if the subject has none yet, with
// consumerGroup recorded as its consumer.
func (a *Client) subjectRoute(ctx context.Context, subject, consumerGroup string, lookup bool) (*Route, error) {
	if err := limits.CheckName("subject", subject); err != nil {
		return nil, sdk.Error(fmt.Errorf("qmq: %w", err))
	}
	if err := limits.CheckName("consumer group", consumerGroup); err != nil {
		return nil, sdk.Error(fmt.Errorf("qmq: %w", err))
	}
	if lookup {
		return a.Route(ctx, subject)
	}
	var r Route
	return &r, a.call(ctx, transport.TypeRoute, transport.RouteRequest{Subject: subject, ConsumerGroup: consumerGroup}, &r)
}

// brokerOf returns the broker group name of route r.
func brokerOf(r *Route, name string) (BrokerGroupRoute, error) {
	for _, g := range r.BrokerGroups {
		if g.Name == name {
			return g, nil
		}
	}
	names := make([]string, 0, len(r.BrokerGroups))
	for _, g := range r.BrokerGroups {
		names = append(names, g.Name)
	}
	return BrokerGroupRoute{}, fmt.Errorf("%w: %q (the route of %s has %v)", ErrNotInRoute, name, r.Subject, names)
}

// brokerCall sends a JSON request to broker group g's leader and decodes
// the JSON answer into out.
func (a *Client) brokerCall(ctx context.Context, g BrokerGroupRoute, t transport.Type, req, out any) error {
	if len(g.Servers) == 0 {
		return fmt.Errorf("qmq: %s in broker group %s: no node to ask", t, g.Name)
	}
	gc, err := a.dial.NewLeaderClient(g.Servers)
	if err != nil {
		return sdk.Error(fmt.Errorf("qmq: %s in broker group %s: %w", t, g.Name, err))
	}
	defer gc.Close()
	gc.SetServers(g.Servers, g.Leader)
	b, _ := json.Marshal(req)
	body, err := callNeeding(ctx, gc, t, req, b)
	if err != nil {
		return sdk.Error(fmt.Errorf("qmq: %s in broker group %s: %w", t, g.Name, err))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("qmq: %s answer of broker group %s: %w", t, g.Name, err)
	}
	return nil
}

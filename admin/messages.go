package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/sdk"
	"github.com/qmqgo/qmq/transport"
)

// StoredMessage is one message as its broker group stores it: where, when,
// and what it holds (properties and body only when asked for).
type StoredMessage = transport.StoredMessage

// MessagePage is one broker group's answer to a listing: its messages,
// where the listing continues (Next, -1 at the window's end) and whether
// the scan budget cut it short (Truncated: narrow the window).
type MessagePage = transport.MessagesPage

// MessageQuery selects messages of Subject without consuming them: those
// appended from Since until Until (zero: no end), or, browsing, from
// consume sequence FromSeq of BrokerGroup on (sequences are per broker
// group); with Tag, only those carrying it; with Key, only those whose key
// (qmq.Message.SetKey) is Key; with Property, only those that have the
// property Property with the value PropertyValue. Limit bounds the messages each broker group
// answers (0: 100, at most 1,000), Budget the consume-log entries each
// reads (0: the broker's default of 100,000, at most 1,000,000). Body
// asks for properties and bodies too.
type MessageQuery struct {
	Subject      string
	Since, Until time.Time
	BrokerGroup  string
	FromSeq      *int64
	Tag, Key     string
	Property     string
	// PropertyValue is the value Property must have.
	PropertyValue string
	Limit         int
	Budget        int
	Body          bool
}

func (q MessageQuery) check() error {
	if err := limits.CheckName("subject", q.Subject); err != nil {
		return sdk.Error(fmt.Errorf("qmq: %w", err))
	}
	switch {
	case q.FromSeq == nil && q.Since.IsZero():
		return badQuery("qmq: messages: give a start, a time (since) or a sequence")
	case q.FromSeq != nil && *q.FromSeq < 0:
		return badQuery("qmq: messages from sequence %d: sequences are at least 0", *q.FromSeq)
	case !q.Until.IsZero() && !q.Until.After(q.Since):
		return badQuery("qmq: messages until %s: not after since %s", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	case q.Limit < 0 || q.Limit > limits.MaxQueryResults:
		return badQuery("qmq: messages: limit %d (1 to %d, 0 for the default)", q.Limit, limits.MaxQueryResults)
	case q.Budget < 0 || q.Budget > limits.MaxScanBudget:
		return badQuery("qmq: messages: scan budget %d (1 to %d, 0 for the default)", q.Budget, limits.MaxScanBudget)
	case len(q.Key) > message.MaxPropertyVal:
		return badQuery("qmq: messages: key of %d bytes (at most %d)", len(q.Key), message.MaxPropertyVal)
	case len(q.Property) > message.MaxPropertyKey || len(q.PropertyValue) > message.MaxPropertyVal:
		return badQuery("qmq: messages: property %.40q: names at most %d bytes, values %d", q.Property, message.MaxPropertyKey, message.MaxPropertyVal)
	case q.Property == "" && q.PropertyValue != "":
		return badQuery("qmq: messages: a property value without a property name")
	case q.Tag != "" && len(q.Tag) > message.MaxTagLen:
		return badQuery("qmq: messages: tag of %d bytes (at most %d)", len(q.Tag), message.MaxTagLen)
	}
	return nil
}

// Messages lists the messages q selects in every broker group of the
// subject's route (or in q.BrokerGroup alone), one page each. A broker
// group that does not answer is named in the error; the others' pages
// are returned. With authentication on, an application that is not an
// admin lists only subjects it may send to or consume.
func (a *Client) Messages(ctx context.Context, q MessageQuery) ([]MessagePage, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	r, err := a.Route(ctx, q.Subject)
	if err != nil {
		return nil, err
	}
	groups := r.BrokerGroups
	switch {
	case q.BrokerGroup != "":
		g, err := brokerOf(r, q.BrokerGroup)
		if err != nil {
			return nil, err
		}
		groups = []BrokerGroupRoute{g}
	case q.FromSeq != nil && len(groups) > 1:
		return nil, badQuery("qmq: messages of %s from sequence %d: the subject lives in %d broker groups, whose sequences differ: name one", q.Subject, *q.FromSeq, len(groups))
	}
	req := transport.MessagesRequest{Subject: q.Subject, Since: q.Since, Until: q.Until, FromSeq: q.FromSeq,
		Tag: q.Tag, Key: q.Key, Limit: q.Limit, Budget: q.Budget, Body: q.Body}
	if q.Property != "" {
		req.Property = &transport.Property{Key: q.Property, Value: q.PropertyValue}
	}
	var out []MessagePage
	var errs []error
	for _, g := range groups {
		var page MessagePage
		if err := a.brokerCall(ctx, g, transport.TypeMessages, req, &page); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, page)
	}
	return out, errors.Join(errs...)
}

// FindOption is an option of FindMessage.
type FindOption func(*transport.MessagesRequest)

// WithTimeline has FindMessage answer each message's timeline too (what
// happened to it, oldest first: StoredMessage.Timeline; TimelineMore
// says it has more than the reply holds).
func WithTimeline() FindOption {
	return func(r *transport.MessagesRequest) { r.Timeline = true }
}

// Event is one step of a message's timeline: sent, handed out, acked...
type Event = transport.Event

// FindMessage finds every retained message whose id is id, in every
// broker group of the cluster (an id is unique within a broker group's
// dedup window only), newest first in each; body asks for their
// properties and bodies too. None found is an empty answer, not an
// error; a broker group that does not answer is named in the error,
// with what the others found. With authentication on, an application
// that is not an admin finds only the messages of subjects it may send
// to or consume.
func (a *Client) FindMessage(ctx context.Context, id string, body bool, opts ...FindOption) ([]StoredMessage, error) {
	if id == "" || len(id) > message.MaxIDLen {
		return nil, fmt.Errorf("qmq: message id of %d bytes (1 to %d)", len(id), message.MaxIDLen)
	}
	c, err := a.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	req := transport.MessagesRequest{ID: id, Body: body}
	for _, o := range opts {
		o(&req)
	}
	out := []StoredMessage{}
	var errs []error
	for _, g := range c.BrokerGroups {
		var page MessagePage
		if err := a.brokerCall(ctx, routeOf(g), transport.TypeMessages, req, &page); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, page.Messages...)
	}
	return out, errors.Join(errs...)
}

// routeOf is broker group g as a route names it: its nodes' client
// addresses and its leader's.
func routeOf(g BrokerGroupStatus) BrokerGroupRoute {
	r := BrokerGroupRoute{Name: g.Name, Writable: g.Writable, Available: g.Available}
	for _, n := range g.Nodes {
		r.Servers = append(r.Servers, n.ClientAddr)
		if n.ID == g.Leader {
			r.Leader = n.ClientAddr
		}
	}
	return r
}

// ParseTime reads a time as the tools take one for a listing's window:
// RFC 3339 (2026-01-31T09:00:00Z), or a duration before now (90m); the
// zero time for "". The error says which forms it takes.
func ParseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%.40q: a duration ago is positive", s)
		}
		if t := now.Add(-d); !t.Before(time.UnixMilli(0)) {
			return t, nil
		}
		return time.Time{}, fmt.Errorf("%.40q ago is before 1970", s)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Before(time.UnixMilli(0)) {
		return time.Time{}, fmt.Errorf("%.40q: an RFC 3339 time after 1970 such as 2026-01-31T09:00:00Z, or a duration ago such as 90m", s)
	}
	return t, nil
}

// badQuery is an ErrBadQuery saying why.
func badQuery(format string, args ...any) error {
	return &queryError{fmt.Sprintf(format, args...)}
}

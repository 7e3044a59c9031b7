package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/transport"
)

// Request decoding: every input is checked before the cluster sees it.

func checkCode(code string) error {
	if err := limits.CheckName("application", code); err != nil {
		return badRequest{err.Error()}
	}
	return nil
}

func pathNames(r *http.Request) (subject, group string, err error) {
	subject, group = r.PathValue("subject"), r.PathValue("group")
	if err := limits.CheckName("subject", subject); err != nil {
		return "", "", badRequest{err.Error()}
	}
	if group != "" {
		if err := limits.CheckName("consumer group", group); err != nil {
			return "", "", badRequest{err.Error()}
		}
	}
	return subject, group, nil
}

// page is a parsed ?offset=&limit=&q=.
type page struct {
	Offset, Limit int
	Prefix        string
}

// parsePage reads offset (0..10⁹), limit (1..MaxLimit, DefaultLimit when
// absent) and q, a name prefix (at most 200 bytes).
func parsePage(q url.Values) (page, error) {
	p := page{Limit: DefaultLimit}
	for k, vs := range q {
		if len(vs) != 1 {
			return p, badf("parameter %s given %d times", k, len(vs))
		}
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1_000_000_000 {
			return p, badf("offset %.20q: a number from 0 to 1,000,000,000", v)
		}
		p.Offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return p, badf("limit %.20q: a number from 1 to %d", v, MaxLimit)
		}
		p.Limit = n
	}
	p.Prefix = q.Get("q")
	if len(p.Prefix) > 200 {
		return p, badf("q: at most 200 bytes")
	}
	return p, nil
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, err
		}
		return nil, badf("reading the body: %v", err)
	}
	return b, nil
}

// decodeStrict decodes one JSON object with no unknown field.
func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return badf("body: %v", err)
	}
	if d.More() {
		return badf("body: more than one JSON value")
	}
	return nil
}

// Duration is a JSON duration: a string Go's time.ParseDuration reads ("30s").
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`a duration is a string, such as "30s"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// setRequest is the body of .../set: the settings to change (absent ones stay).
type setRequest struct {
	MaxDeliveries *uint32   `json:"max_deliveries"`
	RetryFirst    *Duration `json:"retry_first"`
	RetryMax      *Duration `json:"retry_max"`
	AckWait       *Duration `json:"ack_wait"`
	MaxInFlight   *uint32   `json:"max_in_flight"`
	IdleExpiry    *Duration `json:"idle_expiry"`
	Start         string    `json:"start"` // where a broker group new to it starts: latest (default), earliest, time
	StartAt       time.Time `json:"start_at"`
}

func dur(d *Duration) *time.Duration {
	if d == nil {
		return nil
	}
	v := time.Duration(*d)
	return &v
}

func startOf(s string, at time.Time) (transport.StartPosition, error) {
	switch s {
	case "", "latest":
		return transport.StartLatest, nil
	case "earliest":
		return transport.StartEarliest, nil
	case "time":
		if at.IsZero() {
			return 0, badf("start time needs start_at (RFC 3339)")
		}
		return transport.StartAtTime, nil
	}
	return 0, badf("start %.20q: latest, earliest or time", s)
}

func decodeSet(b []byte) (admin.ConsumerGroupChanges, error) {
	var s setRequest
	if err := decodeStrict(b, &s); err != nil {
		return admin.ConsumerGroupChanges{}, err
	}
	start, err := startOf(s.Start, s.StartAt)
	if err != nil {
		return admin.ConsumerGroupChanges{}, err
	}
	return admin.ConsumerGroupChanges{MaxDeliveries: s.MaxDeliveries, RetryFirst: dur(s.RetryFirst), RetryMax: dur(s.RetryMax),
		AckWait: dur(s.AckWait), MaxInFlight: s.MaxInFlight, IdleExpiry: dur(s.IdleExpiry), Start: start, StartAt: s.StartAt}, nil
}

// resetRequest is the body of .../reset.
type resetRequest struct {
	To string    `json:"to"` // earliest, latest or time
	At time.Time `json:"at"`
}

func decodeReset(b []byte) (admin.ResetTarget, error) {
	var s resetRequest
	if err := decodeStrict(b, &s); err != nil {
		return admin.ResetTarget{}, err
	}
	switch s.To {
	case "earliest":
		return admin.ResetToEarliest, nil
	case "latest":
		return admin.ResetToLatest, nil
	case "time":
		if s.At.Before(time.UnixMilli(0)) {
			return admin.ResetTarget{}, badf("reset to time: at, RFC 3339, from 1970")
		}
		return admin.ResetToTime(s.At), nil
	}
	return admin.ResetTarget{}, badf("to %.20q: earliest, latest or time", s.To)
}

// deadLetterRequest is the body of .../dead-letters/resend and /purge.
type deadLetterRequest struct {
	All         bool    `json:"all"`
	BrokerGroup string  `json:"broker_group"`
	Seqs        []int64 `json:"seqs"`
}

// MaxSeqs bounds the sequences of one resend or purge.
const MaxSeqs = 10_000

func decodeDeadLetterOp(b []byte) (admin.DeadLetterSelection, error) {
	var s deadLetterRequest
	if err := decodeStrict(b, &s); err != nil {
		return admin.DeadLetterSelection{}, err
	}
	switch {
	case s.All && (s.BrokerGroup != "" || len(s.Seqs) > 0):
		return admin.DeadLetterSelection{}, badf("all, or sequences of one broker group, not both")
	case !s.All && (s.BrokerGroup == "" || len(s.Seqs) == 0):
		return admin.DeadLetterSelection{}, badf("name a broker group and its sequences, or all")
	case len(s.Seqs) > MaxSeqs:
		return admin.DeadLetterSelection{}, badf("at most %d sequences at once", MaxSeqs)
	}
	if s.BrokerGroup != "" {
		if err := limits.CheckName("broker group", s.BrokerGroup); err != nil {
			return admin.DeadLetterSelection{}, badRequest{err.Error()}
		}
	}
	for _, seq := range s.Seqs {
		if seq < 0 {
			return admin.DeadLetterSelection{}, badf("dead letter %d: sequences are at least 0", seq)
		}
	}
	return admin.DeadLetterSelection{All: s.All, BrokerGroup: s.BrokerGroup, Seqs: s.Seqs}, nil
}

// Read endpoints.

// ClusterView answers GET /api/v1/cluster.
type ClusterView struct {
	Meta         *admin.Status     `json:"meta"`
	MetaNodes    []NodeView        `json:"meta_nodes"`
	BrokerGroups []BrokerGroupView `json:"broker_groups"`
	Subjects     int               `json:"subjects"`
	Errors       []string          `json:"errors,omitempty"`
}

// BrokerGroupView is a broker group with each node's own status.
type BrokerGroupView struct {
	admin.BrokerGroupStatus
	NodeStatus []NodeView `json:"node_status"`
}

// NodeView is one node's Status, or why it did not answer.
type NodeView struct {
	ID     string        `json:"id"`
	Addr   string        `json:"addr"`
	Status *admin.Status `json:"status,omitempty"`
	Error  string        `json:"error,omitempty"`
}

func (h *handler) cluster(r *http.Request, c caller, a *admin.Client) (any, error) {
	cl, err := a.Cluster(r.Context())
	if err != nil {
		return nil, err
	}
	v := ClusterView{Meta: &cl.Meta, Subjects: cl.Subjects}
	status := func(id, addr string) NodeView {
		n := NodeView{ID: id, Addr: addr}
		if addr == "" {
			n.Error = "no client address recorded"
			return n
		}
		st, err := a.Status(r.Context(), addr)
		if err != nil {
			n.Error = err.Error()
		} else {
			n.Status = st
		}
		return n
	}
	for _, m := range cl.Meta.Members {
		v.MetaNodes = append(v.MetaNodes, status(m.ID, m.ClientAddr))
	}
	for _, g := range cl.BrokerGroups {
		bg := BrokerGroupView{BrokerGroupStatus: g}
		for _, n := range g.Nodes {
			bg.NodeStatus = append(bg.NodeStatus, status(n.ID, n.ClientAddr))
		}
		v.BrokerGroups = append(v.BrokerGroups, bg)
	}
	return v, nil
}

// SubjectsPage answers GET /api/v1/subjects.
type SubjectsPage struct {
	Total    int           `json:"total"` // subjects matching q
	Offset   int           `json:"offset"`
	Limit    int           `json:"limit"`
	Subjects []admin.Route `json:"subjects"`
}

func (h *handler) subjects(r *http.Request, c caller, a *admin.Client) (any, error) {
	p, err := parsePage(r.URL.Query())
	if err != nil {
		return nil, err
	}
	rs, err := a.Subjects(r.Context())
	if err != nil {
		return nil, err
	}
	return pageSubjects(rs, p), nil
}

// pageSubjects sorts rs by subject and returns page p of those starting
// with its prefix.
func pageSubjects(rs []admin.Route, p page) SubjectsPage {
	if !sort.SliceIsSorted(rs, func(i, j int) bool { return rs[i].Subject < rs[j].Subject }) {
		slices.SortFunc(rs, func(x, y admin.Route) int { return strings.Compare(x.Subject, y.Subject) })
	}
	lo, _ := slices.BinarySearchFunc(rs, p.Prefix, func(r admin.Route, s string) int { return strings.Compare(r.Subject, s) })
	hi := lo
	if p.Prefix == "" {
		hi = len(rs)
	} else {
		hi = lo + sort.Search(len(rs)-lo, func(i int) bool { return !strings.HasPrefix(rs[lo+i].Subject, p.Prefix) })
	}
	match := rs[lo:hi]
	out := SubjectsPage{Total: len(match), Offset: p.Offset, Limit: p.Limit, Subjects: []admin.Route{}}
	if p.Offset < len(match) {
		out.Subjects = match[p.Offset:min(len(match), p.Offset+p.Limit)]
	}
	return out
}

// consumerGroups answers every consumer group of a subject, or, given any
// of offset, limit and q, a page of those starting with q, with their total:
// a subject may have 4,096, whose rows take a browser about a second to lay
// out where a page of 100 takes a tenth.
func (h *handler) consumerGroups(r *http.Request, c caller, a *admin.Client) (any, error) {
	subject, _, err := pathNames(r)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	paged := q.Has("offset") || q.Has("limit") || q.Has("q")
	p, err := parsePage(q)
	if err != nil {
		return nil, err
	}
	vs, err := a.ConsumerGroups(r.Context(), subject)
	if err != nil && len(vs) == 0 {
		return nil, err
	}
	out := map[string]any{"subject": subject}
	if paged {
		total, page := pageGroups(vs, p)
		out["total"], out["offset"], out["limit"], out["consumer_groups"] = total, p.Offset, p.Limit, page
	} else {
		out["consumer_groups"] = nonNil(vs)
	}
	if err != nil {
		out["error"] = err.Error() // a broker group did not answer; the others' are here
	}
	return out, nil
}

// pageGroups returns how many of vs (one subject's, by group name, as
// admin.ConsumerGroups orders them) start with p's prefix, and page p of them.
func pageGroups(vs []admin.ConsumerGroupView, p page) (int, []admin.ConsumerGroupView) {
	lo, _ := slices.BinarySearchFunc(vs, p.Prefix, func(v admin.ConsumerGroupView, s string) int { return strings.Compare(v.Group, s) })
	hi := lo + sort.Search(len(vs)-lo, func(i int) bool { return !strings.HasPrefix(vs[lo+i].Group, p.Prefix) })
	match := vs[lo:hi]
	if p.Offset >= len(match) {
		return len(match), []admin.ConsumerGroupView{}
	}
	return len(match), match[p.Offset:min(len(match), p.Offset+p.Limit)]
}

func (h *handler) consumerGroup(r *http.Request, c caller, a *admin.Client) (any, error) {
	subject, group, err := pathNames(r)
	if err != nil {
		return nil, err
	}
	v, err := a.ConsumerGroup(r.Context(), subject, group)
	if v == nil {
		return nil, err
	}
	return ConsumerGroupPage{ConsumerGroupView: v, Ages: ages(r.Context(), a, v, h.now())}, nil
}

// DeadLettersView answers GET .../dead-letters.
type DeadLettersView struct {
	Offset int                    `json:"offset"`
	Limit  int                    `json:"limit"`
	Pages  []admin.DeadLetterPage `json:"broker_groups"`
	Error  string                 `json:"error,omitempty"`
}

func (h *handler) deadLetters(r *http.Request, c caller, a *admin.Client) (any, error) {
	subject, group, err := pathNames(r)
	if err != nil {
		return nil, err
	}
	p, err := parsePage(r.URL.Query())
	if err != nil {
		return nil, err
	}
	if p.Prefix != "" {
		return nil, badf("dead letters take no q")
	}
	pages, err := a.DeadLetters(r.Context(), subject, group, p.Offset, p.Limit)
	if err != nil && len(pages) == 0 {
		return nil, err
	}
	v := DeadLettersView{Offset: p.Offset, Limit: p.Limit, Pages: nonNil(pages)}
	if err != nil {
		v.Error = err.Error()
	}
	return v, nil
}

func (h *handler) delays(r *http.Request, c caller, a *admin.Client) (any, error) {
	ds, err := a.Delays(r.Context())
	if err != nil {
		return nil, err
	}
	return map[string]any{"broker_groups": nonNil(ds)}, nil
}

// Actions.

// groupAction is an action on one consumer group: its body decoded by
// decode, then act, whose results per broker group are the answer; an
// error keeps what was done so far.
func groupAction[In, Out any](decode func([]byte) (In, error),
	act func(a *admin.Client) func(ctx context.Context, subject, group string, in In) ([]Out, error)) apiFunc {
	return func(r *http.Request, c caller, a *admin.Client) (any, error) {
		subject, group, err := pathNames(r)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		in, err := decode(b)
		if err != nil {
			return nil, err
		}
		res, err := act(a)(r.Context(), subject, group, in)
		if err != nil {
			if len(res) > 0 {
				return nil, fmt.Errorf("%w (done so far: %v)", err, res)
			}
			return nil, err
		}
		return map[string]any{"broker_groups": nonNil(res)}, nil
	}
}

var (
	setGroup = groupAction(decodeSet, func(a *admin.Client) func(context.Context, string, string, admin.ConsumerGroupChanges) ([]admin.ConsumerGroupResult, error) {
		return a.SetConsumerGroup
	})
	resetGroup = groupAction(decodeReset, func(a *admin.Client) func(context.Context, string, string, admin.ResetTarget) ([]admin.ConsumerGroupResult, error) {
		return a.ResetConsumerGroup
	})
	resendDead = groupAction(decodeDeadLetterOp, func(a *admin.Client) func(context.Context, string, string, admin.DeadLetterSelection) ([]admin.DeadLetterResult, error) {
		return a.ResendDeadLetters
	})
	purgeDead = groupAction(decodeDeadLetterOp, func(a *admin.Client) func(context.Context, string, string, admin.DeadLetterSelection) ([]admin.DeadLetterResult, error) {
		return a.PurgeDeadLetters
	})
)

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

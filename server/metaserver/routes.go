package metaserver

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/transport"
)

// handleRoute answers where a subject lives, assigning it to broker groups
// on its first use and recording the asking consumer group.
func (m *Server) handleRoute(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.RouteRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if err := fsm.CheckName("subject", req.Subject); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	if req.ConsumerGroup != "" {
		if err := fsm.CheckName("consumer group", req.ConsumerGroup); err != nil {
			return nil, transport.Errorf(transport.Invalid, "%v", err)
		}
	}
	// The guard wrote the asking application into the request (a node's
	// stands: it forwards for one).
	app := req.App
	if app != "" {
		if err := auth.CheckCode(app); err != nil {
			return nil, transport.Errorf(transport.Invalid, "%v", err)
		}
	}
	if _, ok := m.fsm.Route(req.Subject); !ok {
		if req.Lookup {
			return nil, transport.Errorf(transport.Invalid, "subject %s has no route: nothing was sent to it or consumed from it", req.Subject)
		}
		if err := m.assign(ctx, req.Subject, m.cfg.SubjectGroups, app); err != nil {
			return nil, err
		}
	}
	r, _ := m.fsm.Route(req.Subject)
	_, known := slices.BinarySearch(r.Consumers, req.ConsumerGroup) // before it is recorded
	known = known && req.ConsumerGroup != ""
	if req.ConsumerGroup != "" && r.Records(req.ConsumerGroup, req.Broker) {
		// Knowing the consumer groups is for operators; a consumer is served
		// its route even when recording it fails at the metaserver's limits
		// (which costs no Raft entry). A new group past its application's
		// own limit is refused: that limit is the application's to keep.
		if err := m.recordConsumer(ctx, &meta.Consumer{Subject: req.Subject, ConsumerGroup: req.ConsumerGroup, App: app, Broker: req.Broker}); err != nil {
			return nil, err
		}
	}
	out := m.route(req.Subject)
	out.ConsumerKnown = known
	return json.Marshal(out)
}

// recordConsumer records a consumer group, one at a time (so that racing
// first pulls of an application's groups cannot each pass its limit
// before any is applied): a new group past its application's own limit is
// refused, INVALID; one the metaserver's own limits cannot record is
// logged and served.
func (m *Server) recordConsumer(ctx context.Context, cmd *meta.Consumer) error {
	m.consumerMu.Lock()
	defer m.consumerMu.Unlock()
	if err := m.fsm.Check(cmd); errors.Is(err, meta.ErrAppLimit) {
		m.countAppLimit(cmd, err)
		return transport.Errorf(transport.Invalid, "%v", err)
	}
	if err := m.proposeChecked(ctx, cmd); err != nil {
		m.log.Warn("recording a consumer group", "subject", cmd.Subject, "consumer_group", cmd.ConsumerGroup, "app", cmd.App, "error", err)
	}
	return nil
}

// assign routes subject to more groups, chosen by load, until it has
// count (or every writable, available group). app is the application a
// new route is created for ("" for none), whose limit it counts towards.
func (m *Server) assign(ctx context.Context, subject string, count int, app string) error {
	m.assignMu.Lock()
	defer m.assignMu.Unlock()
	r, _ := m.fsm.Route(subject) // again, under the lock: a racing request may have assigned it
	need := count - len(r.BrokerGroups)
	if need <= 0 {
		return nil
	}
	picked := m.pickGroups(need, r.BrokerGroups)
	if len(picked) == 0 {
		if len(r.BrokerGroups) > 0 {
			return nil // nothing more to add; the route stands
		}
		return transport.Errorf(transport.Unavailable, "no writable broker group is available for subject %s", subject)
	}
	// A first use only creates: should the route exist after all, it stands.
	// A new subject past a limit is refused here, without a Raft entry.
	err := m.proposeChecked(ctx, &meta.Assign{Subject: subject, BrokerGroups: picked, IfNew: len(r.BrokerGroups) == 0, App: app})
	if err == nil {
		m.log.Info("subject assigned", "subject", subject, "broker_groups", picked, "app", app)
	}
	return err
}

// pickGroups chooses up to n writable, available groups not in exclude:
// groups whose leader has reported before those only presumed alive (a new
// metaserver leader's first timeout), then least loaded first: fewest
// subjects, then fewest message bytes.
func (m *Server) pickGroups(n int, exclude []string) []string {
	counts := m.fsm.SubjectCounts()
	type candidate struct {
		name     string
		presumed bool
		subjects int
		bytes    int64
	}
	var cands []candidate
	for _, name := range m.fsm.BrokerGroupNames() {
		g, _ := m.fsm.BrokerGroup(name)
		if g.ReadOnly || slices.Contains(exclude, name) {
			continue
		}
		h := m.health.group(name)
		if !h.available {
			continue
		}
		cands = append(cands, candidate{name, h.leader == "", counts[name], h.load.MessageBytes})
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.presumed != b.presumed {
			return !a.presumed
		}
		if a.subjects != b.subjects {
			return a.subjects < b.subjects
		}
		return a.bytes < b.bytes
	})
	var out []string
	for _, c := range cands[:min(n, len(cands))] {
		out = append(out, c.name)
	}
	return out
}

// route describes a subject's route with each group's servers and health.
func (m *Server) route(subject string) transport.Route {
	r, _ := m.fsm.Route(subject)
	out := transport.Route{Subject: subject, ConsumerGroups: r.Consumers, BrokerGroups: []transport.BrokerGroupRoute{}}
	for _, name := range r.BrokerGroups {
		g, _ := m.fsm.BrokerGroup(name)
		h := m.health.group(name)
		gr := transport.BrokerGroupRoute{Name: name, Writable: !g.ReadOnly, Available: h.available, Leader: h.leaderAddr}
		for _, id := range sortedKeys(g.Nodes) {
			gr.Servers = append(gr.Servers, g.Nodes[id].ClientAddr)
		}
		out.BrokerGroups = append(out.BrokerGroups, gr)
	}
	return out
}

func (m *Server) handleAssign(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.AssignRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if err := fsm.CheckName("subject", req.Subject); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	switch {
	case len(req.BrokerGroups) > 0 && req.Count != 0:
		return nil, transport.Errorf(transport.Invalid, "name the groups or give a count, not both")
	case len(req.BrokerGroups) > 0:
		if err := m.proposeChecked(ctx, &meta.Assign{Subject: req.Subject, BrokerGroups: req.BrokerGroups}); err != nil {
			return nil, err
		}
	case req.Count > 0 && req.Count <= meta.MaxBrokerGroupsPerSubject:
		// An operator's assignment: the route is no application's.
		if err := m.assign(ctx, req.Subject, req.Count, ""); err != nil {
			return nil, err
		}
	default:
		return nil, transport.Errorf(transport.Invalid, "count %d outside 1..%d", req.Count, meta.MaxBrokerGroupsPerSubject)
	}
	return json.Marshal(m.route(req.Subject))
}

func (m *Server) handleSubjects() ([]byte, error) {
	out := []transport.Route{}
	for _, s := range m.fsm.Subjects() {
		out = append(out, m.route(s))
	}
	return json.Marshal(out)
}

func (m *Server) handleSetWritable(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.SetWritableRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if err := m.proposeChecked(ctx, &meta.SetWritable{BrokerGroup: req.BrokerGroup, Writable: req.Writable}); err != nil {
		return nil, err
	}
	m.log.Info("broker group writable changed", "broker_group", req.BrokerGroup, "writable", req.Writable)
	return nil, nil
}

// handleForgetGroup forgets the record of a consumer group of a subject,
// making room under meta.MaxConsumerGroupsPerSubject (the broker groups forget its
// state on their own, through TypeForgetConsumerGroup).
func (m *Server) handleForgetGroup(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.ForgetConsumerGroupRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if err := m.proposeChecked(ctx, &meta.ForgetConsumer{Subject: req.Subject, ConsumerGroup: req.ConsumerGroup, Broker: req.Broker}); err != nil {
		return nil, err
	}
	if req.Broker == "" {
		m.log.Info("consumer group record forgotten", "subject", req.Subject, "consumer_group", req.ConsumerGroup)
	}
	return nil, nil
}

// proposeChecked checks a command against the state before proposing it
// (names, addresses, what it refers to, the state's limits), so a request
// bound to be refused costs no Raft entry. Apply decides again: a racing
// command may have taken the last room.
func (m *Server) proposeChecked(ctx context.Context, cmd meta.Command) error {
	if err := m.fsm.Check(cmd); err != nil {
		m.countAppLimit(cmd, err)
		return transport.Errorf(transport.Invalid, "%v", err)
	}
	return m.group.Propose(ctx, cmd)
}

// countAppLimit counts a refusal at an application's own limit, by which
// limit: a new subject (an Assign) or a new consumer group.
func (m *Server) countAppLimit(cmd meta.Command, err error) {
	if !errors.Is(err, meta.ErrAppLimit) {
		return
	}
	limit := "consumer_groups"
	if _, ok := cmd.(*meta.Assign); ok {
		limit = "subjects"
	}
	m.appLimitHits.WithLabelValues(limit).Inc()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

package server

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/transport"
)

// The broker's link to its metaserver: it registers on start (no manual
// step before a node's first start), reports its position every
// MetaHeartbeat, learns from the reply whether its group is writable, and
// forwards clients' metaserver requests.

// startMetaLink starts registration and heartbeats when a metaserver is
// configured.
func (n *Node) startMetaLink() error {
	n.writable.Store(true)
	if len(n.cfg.Meta) == 0 {
		return nil
	}
	writable, err := storedWritable(n.raftGroup.store.Stable())
	if err != nil {
		return err
	}
	n.writable.Store(writable) // as the metaserver last said: see writable.go
	n.kept.Store(writable)
	if n.meta, err = n.dial.NewLeaderClient(n.cfg.Meta); err != nil {
		return err
	}
	n.goLoop(n.reportToMeta)
	if n.cfg.Auth {
		// Only with authentication does recordNewGroup make records.
		n.forgotten = newForgottenGroups(n.log.Named("meta"), n.fsm.HasConsumerGroup)
		n.forgotten.hold = n.cfg.holdForgetReports
		n.goLoop(func() {
			n.forgotten.run(n.ctx, n.cfg.BrokerGroup, func(ctx context.Context, body []byte) error {
				_, err := n.forwardToMeta(ctx, transport.TypeMetaForgetConsumerGroup, body)
				return err
			})
		})
	}
	return nil
}

// reportToMeta registers the node, retrying until the metaserver answers,
// then heartbeats until the node closes, registering again whenever the
// metaserver does not know the node while it is still a member of its group.
func (n *Node) reportToMeta() {
	if !n.registerWithMeta() {
		return
	}
	t := time.NewTicker(n.cfg.MetaHeartbeat)
	defer t.Stop()
	for {
		if !n.heartbeatMeta() && n.isMember() && !n.registerWithMeta() {
			return
		}
		select {
		case <-t.C:
		case <-n.ctx.Done():
			return
		}
	}
}

// registerWithMeta registers the node, retrying with backoff; false means
// the node is closing.
func (n *Node) registerWithMeta() bool {
	req := transport.RegisterRequest{BrokerGroup: n.cfg.BrokerGroup, ID: n.cfg.ID, RaftAddr: n.cfg.RaftAddr,
		ClientAddr: n.clientAddr, HTTPAddr: n.HTTPAddr()}
	body, _ := json.Marshal(req)
	backoff := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		_, err := n.meta.Call(ctx, transport.TypeRegister, body)
		cancel()
		if err == nil {
			n.log.Info("registered with the metaserver")
			return true
		}
		if n.ctx.Err() != nil {
			return false
		}
		n.log.Warn("registering with the metaserver; will retry", "error", err)
		if !wait.Sleep(n.ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// isMember reports whether the node is in its group's Raft configuration,
// as far as it knows. A node removed with qmqctl leave may not learn it,
// so stop its process after leave.
func (n *Node) isMember() bool {
	for _, m := range n.membership().Members {
		if m.ID == n.cfg.ID {
			return true
		}
	}
	return false
}

// heartbeatMeta reports the node's position; it returns false only when
// the metaserver answered that it does not know the node.
func (n *Node) heartbeatMeta() bool {
	// One at a time (refreshApps sends some too): a late reply must not
	// replace the applications a newer one brought.
	n.heartbeatMu.Lock()
	defer n.heartbeatMu.Unlock()
	ends := n.fsm.Ends()
	hb := transport.BrokerHeartbeat{Status: n.Status(),
		Load:        transport.Load{Subjects: len(ends.Consume), MessageBytes: ends.Messages},
		AppsVersion: n.apps.Load().Version()}
	body, _ := json.Marshal(hb)
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.MetaHeartbeat)
	defer cancel()
	resp, err := n.meta.Call(ctx, transport.TypeBrokerHeartbeat, body)
	if err != nil {
		if n.ctx.Err() == nil {
			n.log.Warn("heartbeat to the metaserver", "error", err)
		}
		return true
	}
	var reply transport.HeartbeatReply
	if err := json.Unmarshal(resp, &reply); err != nil {
		n.log.Warn("heartbeat reply from the metaserver", "error", err)
		return true
	}
	if n.writable.Swap(reply.Writable) != reply.Writable {
		n.log.Info("group writable changed by the metaserver", "writable", reply.Writable)
	}
	if n.kept.Load() != reply.Writable {
		n.keepWritable(reply.Writable)
	}
	n.compareAuth(reply.Auth)
	if reply.Apps != nil && (reply.Auth || !n.cfg.Auth) {
		n.setApps(reply.Apps.Apps)
	}
	if reply.Unknown {
		n.log.Warn("the metaserver does not know this node")
	}
	return !reply.Unknown
}

// The refusals of compareAuth.
const (
	refuseNoAuth = "this broker does not check applications but its metaserver does: " +
		"it serves no client until restarted with --auth"
	refuseOpenMeta = "this broker checks applications but its metaserver checks no applications, " +
		"so anyone could have made the ones it would trust: it serves no client until its metaserver runs with --auth " +
		"(turn --auth on for the metaservers first, then the brokers: docs/security.md)"
)

// compareAuth compares the node's authentication with its metaserver's,
// as the heartbeat reply says (metaChecks), and refuses clients while they
// disagree. A broker without Auth under a metaserver that checks would
// serve, and forward as a node, what every other node refuses; that lasts
// until it is restarted with --auth. A broker with Auth under a
// metaserver that checks nothing would trust applications anyone holding
// a client certificate could have made there; it serves again once the
// metaserver checks.
func (n *Node) compareAuth(metaChecks bool) {
	why := ""
	switch {
	case metaChecks && !n.cfg.Auth:
		why = refuseNoAuth
	case !metaChecks && n.cfg.Auth:
		why = refuseOpenMeta
	}
	old := n.refusal()
	if old == why || old == refuseNoAuth {
		return
	}
	if why == "" {
		n.refusing.Store(nil)
		n.log.Info("the metaserver checks applications now: serving clients again")
		return
	}
	n.refusing.Store(&why)
	n.log.Error("refusing every client", "reason", why)
}

// refusal is why the node serves no client, "" while it serves them.
func (n *Node) refusal() string {
	if p := n.refusing.Load(); p != nil {
		return *p
	}
	return ""
}

// forwardToMeta answers a metaserver request by asking the metaserver. A
// standalone node answers route requests with its own group.
func (n *Node) forwardToMeta(ctx context.Context, t transport.Type, p []byte) ([]byte, error) {
	if n.meta == nil {
		switch t {
		case transport.TypeRoute:
			return n.standaloneRoute(p)
		case transport.TypeCluster:
			return json.Marshal(n.standaloneCluster())
		case transport.TypeMetaForgetConsumerGroup:
			return nil, nil // no metaserver, no record of consumer groups
		}
		return nil, transport.Errorf(transport.Invalid, "%s: node %s has no metaserver (start it with --meta)", t, n.cfg.ID)
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	body, err := n.meta.Call(ctx, t, p)
	var e *transport.Error
	if err != nil && !errors.As(err, &e) {
		return nil, transport.Errorf(transport.Unavailable, "metaserver: %v", err)
	}
	return body, err
}

// standaloneRoute routes every subject to this node's own group.
func (n *Node) standaloneRoute(p []byte) ([]byte, error) {
	var req transport.RouteRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	st := n.membership()
	g := transport.BrokerGroupRoute{Name: n.cfg.BrokerGroup, Writable: true, Available: true, Leader: st.LeaderAddr}
	for _, m := range st.Members {
		if m.ClientAddr != "" {
			g.Servers = append(g.Servers, m.ClientAddr)
		}
	}
	if len(g.Servers) == 0 {
		g.Servers = []string{n.clientAddr}
	}
	return json.Marshal(transport.Route{Subject: req.Subject, BrokerGroups: []transport.BrokerGroupRoute{g}})
}

// standaloneCluster describes this node's group as the whole cluster.
func (n *Node) standaloneCluster() transport.Cluster {
	st := n.membership()
	g := transport.BrokerGroupStatus{Name: n.cfg.BrokerGroup, Writable: true, Available: st.Leader != "",
		Leader: st.Leader, Term: st.Term, Nodes: []transport.NodeStatus{}}
	for _, m := range st.Members {
		ns := transport.NodeStatus{ID: m.ID, ClientAddr: m.ClientAddr, RaftAddr: m.RaftAddr, State: "Unknown", SeenMillis: -1}
		if m.ID == n.cfg.ID {
			ns.State, ns.Term, ns.AppliedIndex, ns.SeenMillis = st.State, st.Term, st.AppliedIndex, 0
			ns.TLS, ns.Insecure, ns.Refusing = st.TLS, st.Insecure, st.Refusing
		}
		g.Nodes = append(g.Nodes, ns)
	}
	return transport.Cluster{BrokerGroups: []transport.BrokerGroupStatus{g}}
}

// setApps replaces the applications the node checks requests against
// with the metaserver's; a table that does not check keeps the one held.
func (n *Node) setApps(apps []auth.App) {
	t, err := auth.NewTable(apps)
	if err != nil {
		n.log.Warn("applications from the metaserver refused; keeping the ones held", "error", err)
		return
	}
	n.apps.Store(t)
	n.log.Info("applications received from the metaserver", "apps", t.Len(), "version", t.Version()[:12])
}

// recordNewGroup has the metaserver record a consumer group an
// application's pull is about to create here, before it is created: the
// metaserver counts it against the application's limit of consumer
// groups, which a client pulling without asking for the route first
// would otherwise escape. The record is this broker group's, provisional:
// when the group is forgotten here by itself, the leader says so
// (forgottenGroups) and the metaserver gives the count back, unless a
// consumer declared the group by asking for its route or another broker
// group holds it too. Only with authentication on, for an application,
// and once per group: a group this node knows costs a map lookup.
//
// It returns what the pull calls once its first proposal has applied (or
// failed): if the group did not come to exist here after all (the pull was
// refused), the record is reported forgotten at once, or it would count
// for ever. Until then no report for the group is sent (forgottenGroups),
// and a report being sent is waited for first, so that a late report
// cannot take the record of the group this pull creates again.
func (n *Node) recordNewGroup(ctx context.Context, subject, group string) (func(), error) {
	app := accessOf(ctx).app()
	if app == "" || n.meta == nil || n.forgotten == nil || n.fsm.HasConsumerGroup(subject, group) {
		return func() {}, nil
	}
	k := forgottenKey{subject, group}
	n.forgotten.creating(k)
	var once sync.Once
	done := func() {
		once.Do(func() {
			n.forgotten.created(k)
			if !n.fsm.HasConsumerGroup(subject, group) {
				n.forgotten.report(subject, group)
			}
		})
	}
	body, _ := json.Marshal(transport.RouteRequest{Subject: subject, ConsumerGroup: group, App: app, Broker: n.cfg.BrokerGroup})
	if _, err := n.forwardToMeta(ctx, transport.TypeRoute, body); err != nil {
		done() // the metaserver may have recorded it anyway
		return nil, err
	}
	return done, nil
}

// appsRefreshEvery bounds how often refreshApps asks the metaserver.
const appsRefreshEvery = time.Second

// refreshApps asks the metaserver for its applications now (a heartbeat,
// whose reply carries them when they differ), when a Hello names an
// application this node does not know or a secret it cannot verify: one
// created or rotated since the last heartbeat is then usable at once. At
// most once per appsRefreshEvery, so that a client trying names or
// secrets in a loop costs the metaserver one heartbeat a second; Hellos
// meanwhile wait for the one under way.
func (n *Node) refreshApps() {
	if n.meta == nil {
		return
	}
	n.appsAskMu.Lock()
	defer n.appsAskMu.Unlock()
	if time.Since(n.appsAsked) < appsRefreshEvery {
		return
	}
	n.appsAsked = time.Now()
	n.heartbeatMeta()
}

// recordNewSubject has the metaserver create (and count against the
// application's limit of subjects) the route of a subject an
// application's send is about to create here, before it is created: a
// client sending without asking for the route first would otherwise
// escape the limit. Only with authentication on, for an application, and
// once per subject of a send request (seen keeps the answers): a subject
// this node holds costs a lookup. app is the application sending ("" for
// a node, or without authentication: nothing to record).
func (n *Node) recordNewSubject(ctx context.Context, app string, seen *map[string]error, subject string) error {
	if app == "" || n.meta == nil || n.fsm.HasSubject(subject) {
		return nil
	}
	if err, ok := (*seen)[subject]; ok {
		return err
	}
	if *seen == nil {
		*seen = map[string]error{}
	}
	body, _ := json.Marshal(transport.RouteRequest{Subject: subject, App: app})
	_, err := n.forwardToMeta(ctx, transport.TypeRoute, body)
	(*seen)[subject] = err
	return err
}

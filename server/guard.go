package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/transport"
)

// The guard checks every client request of a node with authentication
// on (NodeConfig.Auth) before its handler runs. Who asks is one of:
//
//   - a node: the connection presented a node certificate of the cluster's
//     CA (both serverAuth and clientAuth, as nodes dial each other with).
//     Nodes, and operators holding a node certificate, may do everything;
//   - an application: the connection said Hello with its code and secret,
//     checked against the table of applications (the metaserver's
//     replicated state; brokers receive it with their heartbeat replies);
//   - anyone else, who may only say Hello.
//
// Each request type has a class: node-only (registration, heartbeats,
// clocks), admin (membership, routing, consumer-group and dead-letter
// operations, applications), read (status and listings: any application),
// lookup (stored messages: an application reads those of the subjects it
// may use, the handler keeps to them; audited as reads), and the rest,
// whose subjects and consumer groups the handlers check against the
// application's rights (access). An application's rights are
// looked up on every request, so a permission changed, a secret rotated
// out or an application deleted takes effect on open connections too.
type guard struct {
	on    bool
	table func() *auth.Table // nil until a broker first hears from its metaserver
	// refresh, if set, fetches the table again before a Hello is refused:
	// a broker's may predate the application or the secret (a broker
	// rate-limits it; a metaserver's table is always current).
	refresh func()
	// closed, if set and not "", is why every request but a node's is
	// refused: a broker whose authentication and its metaserver's
	// disagree serves no client (see compareAuth).
	closed func() string
	now    func() time.Time
	audit  *auditLog

	refused *prometheus.CounterVec // by reason
}

// newGuard returns a guard; with on false it only answers Hello (accepting
// any credentials unchecked) and lets everything through.
func newGuard(on bool, table func() *auth.Table, audit *auditLog, reg *prometheus.Registry) *guard {
	g := &guard{on: on, table: table, now: time.Now, audit: audit,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qmq_auth_refused_total",
			Help: "Client requests refused by authentication (unauthenticated) or permissions (permission_denied).",
		}, []string{"reason"})}
	reg.MustRegister(g.refused)
	return g
}

// class is what a request type asks of its caller.
type class uint8

const (
	classApp   class = iota // an application; the handler checks subjects and groups
	classRead               // any application
	classAdmin              // an admin application
	classNode               // a node
	// classLookup: an application, reading stored messages or dead
	// letters; the handler keeps to the subjects (messages, access.read)
	// or consumer groups (dead letters, access.consume) it may consume.
	// Audited as a read.
	classLookup
)

func classOf(t transport.Type) class {
	switch t {
	case transport.TypeStatus, transport.TypeCluster, transport.TypeSubjects, transport.TypeDelays, transport.TypeConsumerGroups, transport.TypeBrokerConfig:
		return classRead
	case transport.TypeRegister, transport.TypeBrokerHeartbeat, transport.TypeTime:
		return classNode
	case transport.TypeMessages, transport.TypeDeadLetters:
		return classLookup
	case transport.TypeSend, transport.TypePull, transport.TypeAck, transport.TypeNack, transport.TypeExtend,
		transport.TypeHeartbeat, transport.TypeRoute, transport.TypeRegisterConsumer:
		return classApp
	}
	// Everything else changes the cluster: membership, routing, consumer
	// groups, dead letters (resent, purged), applications. A type not listed here is an
	// admin's, so a new one is never open by omission.
	return classAdmin
}

// wrap returns h behind the guard: Hello is answered here, and every
// other request reaches h only if its caller may make it, with its access
// in ctx for the handler's finer checks.
func (g *guard) wrap(h transport.Handler) transport.Handler {
	return func(ctx context.Context, t transport.Type, p []byte) ([]byte, error) {
		acc, p, err := g.admit(ctx, t, p)
		if err != nil {
			return nil, err
		}
		if t == transport.TypeHello {
			return helloAnswer, nil
		}
		if acc != nil { // nil, as accessOf answers without it: no context to make per request
			ctx = context.WithValue(ctx, accessKey{}, acc)
		}
		return h(ctx, t, p)
	}
}

// helloAnswer is the answer to every Hello that holds: the version
// Numbers this build supports, so that a client asks this node only what
// it supports.
var helloAnswer = (&transport.HelloResponse{Versions: version.Build()}).Encode()

// admit decides a request: its access (nil: everything allowed) and its
// payload, which for a route request names the application asking.
func (g *guard) admit(ctx context.Context, t transport.Type, p []byte) (*access, []byte, error) {
	peer := transport.PeerOf(ctx)
	if peer != nil && g.closed != nil && !isNode(peer) {
		if why := g.closed(); why != "" {
			return nil, nil, transport.Errorf(transport.Unavailable, "%s", why)
		}
	}
	if !g.on || peer == nil { // authentication off, or a call from inside the node
		if t == transport.TypeRoute && peer != nil {
			p = routeOnBehalf(p, "") // only a node may say whom it asks for
		}
		return nil, p, nil
	}
	if isNode(peer) {
		acc := &access{g: g, peer: peer, who: "node:" + peer.Certificate.Subject.CommonName}
		switch {
		case t == transport.TypeHello:
		case classOf(t) == classAdmin:
			g.audit.admin(acc.who, peer.Addr, t, p)
		case classOf(t) == classLookup:
			g.audit.read(acc.who, peer.Addr, t, p)
		}
		return acc, p, nil
	}
	if t == transport.TypeHello {
		return nil, nil, g.hello(peer, p)
	}
	id, ok := peer.Identity().(auth.Identity)
	if !ok {
		return nil, nil, g.unauthenticated(peer, "anonymous", t,
			"this node checks applications: connect with the application's code and secret (qmq.WithApp; qmqctl --app and --secret)")
	}
	table := g.table()
	if table == nil {
		return nil, nil, errNoTable
	}
	rights, err := table.Rights(id, g.now())
	if err != nil {
		return nil, nil, g.unauthenticated(peer, "app:"+id.App, t, why(err))
	}
	acc := &access{g: g, peer: peer, who: "app:" + id.App, rights: rights}
	switch classOf(t) {
	case classNode:
		return nil, nil, acc.deny(t, fmt.Sprintf("only a node may send %s requests", t))
	case classAdmin:
		if !rights.Admin() {
			return nil, nil, acc.deny(t, fmt.Sprintf("application %s is not an admin: %s is an admin operation", id.App, t))
		}
		g.audit.admin(acc.who, peer.Addr, t, p)
	case classLookup:
		g.audit.read(acc.who, peer.Addr, t, p)
	case classApp:
		if t == transport.TypeRoute {
			var err error
			if p, err = acc.route(p); err != nil {
				return nil, nil, err
			}
		}
	}
	return acc, p, nil
}

// errNoTable answers requests that need the applications before a
// broker first heard from its metaserver; clients retry it.
var errNoTable = transport.Errorf(transport.Unavailable, "this node has not yet received the applications from the metaserver")

// helloTimeout is how long a connection to a node with authentication on
// may go without a node certificate or a Hello that held: then it is
// closed, so that nobody holds connections without proving who they are.
const helloTimeout = 10 * time.Second

// identified reports whether peer is a node or an application.
func identified(peer *transport.Peer) bool {
	return isNode(peer) || peer.Identity() != nil
}

// isNode reports whether peer presented a node certificate (verified by
// the TLS handshake against the CA).
func isNode(peer *transport.Peer) bool {
	return peer.Certificate != nil && tlsconf.CheckNodeCert(peer.Certificate) == nil
}

// hello checks an application's credentials and, if they hold, makes them
// the connection's identity.
func (g *guard) hello(peer *transport.Peer, p []byte) error {
	q, err := transport.DecodeHelloRequest(p)
	if err != nil {
		// A secret or a code past its limit, say: refused and counted like
		// a wrong one, the reason without the payload.
		g.unauthenticated(peer, "app:?", transport.TypeHello, "a malformed hello")
		return err
	}
	if err := auth.CheckCode(q.App); err != nil {
		// Not a name: the audit log quotes it rather than writing it raw.
		return g.unauthenticated(peer, "app:?", transport.TypeHello, strings.TrimPrefix(err.Error(), auth.ErrInvalid.Error()+": "))
	}
	table := g.table()
	if table == nil && g.refresh != nil {
		g.refresh()
		table = g.table()
	}
	if table == nil {
		return errNoTable
	}
	id, err := table.Authenticate(q.App, q.Secret, g.now())
	if err != nil && g.refresh != nil {
		// Created or rotated since this node last heard: look again.
		g.refresh()
		id, err = g.table().Authenticate(q.App, q.Secret, g.now())
	}
	if err != nil {
		return g.unauthenticated(peer, "app:"+q.App, transport.TypeHello, why(err))
	}
	peer.SetIdentity(id)
	return nil
}

func (g *guard) unauthenticated(peer *transport.Peer, who string, t transport.Type, why string) error {
	g.refused.WithLabelValues("unauthenticated").Inc()
	g.audit.refused(who, peer.Addr, t, why)
	return transport.Errorf(transport.Unauthenticated, "%s", why)
}

// why is an authentication refusal's reason without the package's
// prefix, which the wire code already says.
func why(err error) string {
	return strings.TrimPrefix(err.Error(), auth.ErrUnauthenticated.Error()+": ")
}

type accessKey struct{}

// access is what one request's caller may do. A nil *access may do
// everything: authentication is off, or the call comes from inside the
// node.
type access struct {
	g      *guard
	peer   *transport.Peer
	who    string       // for the audit log: "node:ID" or "app:CODE"
	rights *auth.Rights // nil for a node
}

// accessOf returns the access the guard gave ctx's request.
func accessOf(ctx context.Context) *access {
	a, _ := ctx.Value(accessKey{}).(*access)
	return a
}

// app is the application asking, "" for a node or without authentication.
func (a *access) app() string {
	if a == nil || a.rights == nil {
		return ""
	}
	return a.rights.App().Code
}

// sender is the application sending, with its limit of delayed messages
// pending in a broker group, for an Append; nil for none.
func (a *access) sender() *fsm.Sender {
	if a == nil || a.rights == nil {
		return nil
	}
	app := a.rights.App()
	return &fsm.Sender{App: app.Code, MaxDelayed: int64(app.DelayedLimit())}
}

// consumerQuota is the application pulling and its limit of consumers
// registered at once in a broker group, for a Pull; "" and 0 for none.
func (a *access) consumerQuota() (string, int) {
	if a == nil || a.rights == nil {
		return "", 0
	}
	app := a.rights.App()
	return app.Code, app.ConsumerLimit()
}

// send refuses a message to subject the application may not send to.
func (a *access) send(subject string) error {
	if a == nil || a.rights == nil || a.rights.MaySend(subject) {
		return nil
	}
	return a.deny(transport.TypeSend, fmt.Sprintf("application %s may not send to subject %s", a.app(), subject))
}

// consume refuses a consumer's request for a subject and consumer group
// the application may not consume as.
func (a *access) consume(t transport.Type, subject, group string) error {
	if a == nil || a.rights == nil || a.rights.MayConsume(subject, group) {
		return nil
	}
	return a.deny(t, fmt.Sprintf("application %s may not consume subject %s as consumer group %s", a.app(), subject, group))
}

// mayRead reports whether the application may read the stored messages
// of subject: those of a subject it may consume (an admin's: every
// subject). Sending is not reading: producers sharing a subject do not
// see each other's messages.
func (a *access) mayRead(subject string) bool {
	return a == nil || a.rights == nil || a.rights.MayRead(subject)
}

// read refuses a listing of subject's stored messages the application may
// not read.
func (a *access) read(subject string) error {
	if a.mayRead(subject) {
		return nil
	}
	return a.deny(transport.TypeMessages, fmt.Sprintf("application %s may not consume subject %s: it may not read its messages", a.app(), subject))
}

// route checks a route request: a consumer's (it names its consumer
// group) as consume, any other as a subject the application sends to or
// consumes. It returns the payload naming the application, which the
// metaserver counts a new subject or consumer group against.
func (a *access) route(p []byte) ([]byte, error) {
	var req transport.RouteRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	// Names first, so that a refusal (and the audit line) never quotes a
	// name past its limit.
	if err := limits.CheckName("subject", req.Subject); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	if req.ConsumerGroup != "" {
		if err := limits.CheckName("consumer group", req.ConsumerGroup); err != nil {
			return nil, transport.Errorf(transport.Invalid, "%v", err)
		}
		if err := a.consume(transport.TypeRoute, req.Subject, req.ConsumerGroup); err != nil {
			return nil, err
		}
	} else if !a.rights.MayUse(req.Subject) {
		return nil, a.deny(transport.TypeRoute, fmt.Sprintf("application %s may neither send to nor consume subject %s", a.app(), req.Subject))
	}
	req.App, req.Broker = a.app(), "" // only a node records for its broker group
	b, _ := json.Marshal(req)
	return b, nil
}

// routeOnBehalf returns a route request's payload with App set to app and
// no Broker, or p unchanged if it does not decode (its handler refuses
// it).
func routeOnBehalf(p []byte, app string) []byte {
	var req transport.RouteRequest
	if transport.DecodeJSON(p, &req) != nil || req.App == app && req.Broker == "" {
		return p
	}
	req.App, req.Broker = app, ""
	b, _ := json.Marshal(req)
	return b
}

// deny counts, logs and returns a refusal of what the application asked.
func (a *access) deny(t transport.Type, why string) error {
	a.g.refused.WithLabelValues("permission_denied").Inc()
	a.g.audit.refused(a.who, a.peer.Addr, t, why)
	return transport.Errorf(transport.PermissionDenied, "%s", why)
}

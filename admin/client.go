package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/sdk"
	"github.com/qmqgo/qmq/transport"
)

// Status is one node's report of itself and its group.
type Status = transport.Status

// Cluster is the metaserver's view of every broker group.
type Cluster = transport.Cluster

// BrokerGroupStatus is one broker group in a Cluster: its nodes, its
// leader, whether it takes sends.
type BrokerGroupStatus = transport.BrokerGroupStatus

// Route is where a subject lives.
type Route = transport.Route

// BrokerGroupRoute is one broker group of a Route.
type BrokerGroupRoute = transport.BrokerGroupRoute

// BrokerGroupDelays is one broker group's pending delayed messages, by
// hour of delivery and by subject.
type BrokerGroupDelays = transport.Delays

// MetaGroup names the metaserver's own Raft group in Join, Leave and
// TransferLeader, where a broker group's name goes otherwise.
const MetaGroup = "meta"

// MetaGroup is the brokers' name for it: the build fails if it differs
// (a duplicate key does not compile).
var _ = map[bool]int{false: 0, MetaGroup == limits.MetaGroup: 1}

// Client runs operator requests against a cluster: through any metaserver
// node, or any broker node (which forwards to its metaserver).
type Client struct {
	dial transport.Dialer // for the metaserver and every group it names
	c    *transport.LeaderClient
}

// New returns a Client for the cluster at servers: a comma-separated
// HOST:PORT list of metaserver or broker nodes (any one will do), as
// qmq.NewProducer takes. Its options say how to connect, as they do for
// the data-plane clients: qmq.WithTLS or qmq.WithTLSConfig, and
// qmq.WithApp (an admin application's, for most requests).
func New(servers string, opts ...qmq.ConnOption) (*Client, error) {
	dial, err := sdk.Dial(opts)
	if err != nil {
		return nil, err
	}
	c, err := dial.NewLeaderClient(transport.SplitServers(servers))
	if err != nil {
		return nil, sdk.Error(err)
	}
	return &Client{dial: dial, c: c}, nil
}

// Servers returns the addresses the Client was given.
func (a *Client) Servers() []string { return a.c.Servers() }

// Status asks the node at addr for its status (no redirect to the leader).
func (a *Client) Status(ctx context.Context, addr string) (*Status, error) {
	var st Status
	return &st, a.nodeCall(ctx, addr, transport.TypeStatus, &st)
}

// nodeCall sends a request without payload to the node at addr (no
// redirect) and decodes its JSON answer into out.
func (a *Client) nodeCall(ctx context.Context, addr string, t transport.Type, out any) error {
	conn, err := a.c.Conn(ctx, addr)
	if err != nil {
		return sdk.Error(err)
	}
	body, err := conn.Call(ctx, t, nil)
	if err != nil {
		return sdk.Error(err)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("qmq: %s from %s: %w", t, addr, err)
	}
	return nil
}

// call sends a JSON request through the metaserver and decodes the JSON
// answer into out, unless out is nil.
func (a *Client) call(ctx context.Context, t transport.Type, req, out any) error {
	var payload []byte
	if req != nil {
		payload, _ = json.Marshal(req)
	}
	body, err := a.c.Call(ctx, t, payload)
	if err != nil || out == nil {
		return sdk.Error(err)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("qmq: %s: %w", t, err)
	}
	return nil
}

// Cluster returns the metaserver's view of the cluster.
func (a *Client) Cluster(ctx context.Context) (*Cluster, error) {
	var c Cluster
	return &c, a.call(ctx, transport.TypeCluster, nil, &c)
}

// Route returns where subject lives; a subject nothing was sent to or
// consumed from has no route, which is INVALID.
func (a *Client) Route(ctx context.Context, subject string) (*Route, error) {
	var r Route
	return &r, a.call(ctx, transport.TypeRoute, transport.RouteRequest{Subject: subject, Lookup: true}, &r)
}

// Subjects returns every subject's route.
func (a *Client) Subjects(ctx context.Context) ([]Route, error) {
	var rs []Route
	return rs, a.call(ctx, transport.TypeSubjects, nil, &rs)
}

// Assign adds broker groups to subject's route: the named ones, or, with
// count > 0, as many as it takes (chosen by load) to reach count groups.
//
// The subject's consumer groups are then set up in the broker groups it
// added, with the settings the earlier broker groups hold (an operator's
// `group set` reached only those), at the earliest message: everything a
// new broker group stores came after they existed.
func (a *Client) Assign(ctx context.Context, subject string, brokerGroups []string, count int) (*Route, error) {
	before, err := a.Route(ctx, subject)
	switch {
	case transport.CodeOf(err) == transport.Invalid:
		before = nil // a subject with no route yet has no consumer groups (a bad name is refused below)
	case err != nil:
		return nil, err
	}
	var r Route
	if err := a.call(ctx, transport.TypeAssign, transport.AssignRequest{Subject: subject, BrokerGroups: brokerGroups, Count: count}, &r); err != nil {
		return &r, err
	}
	if err := a.carrySettings(ctx, before, &r); err != nil {
		return &r, fmt.Errorf("qmq: %s assigned to %d broker groups, but its consumer groups' settings did not all reach the new ones (set them again with SetConsumerGroup): %w",
			subject, len(r.BrokerGroups), err)
	}
	return &r, nil
}

// carrySettings sets each consumer group of after, as an earlier broker
// group of before holds it, in the broker groups after adds.
func (a *Client) carrySettings(ctx context.Context, before, after *Route) error {
	if before == nil || len(after.BrokerGroups) == len(before.BrokerGroups) {
		return nil
	}
	old := map[string]bool{}
	for _, g := range before.BrokerGroups {
		old[g.Name] = true
	}
	for _, consumerGroup := range after.ConsumerGroups {
		v, err := a.ConsumerGroup(ctx, after.Subject, consumerGroup)
		if errors.Is(err, ErrNoConsumerGroup) {
			continue // recorded, but no broker group holds it: nothing to carry
		}
		if v == nil {
			return err
		}
		i := slices.IndexFunc(v.BrokerGroups, func(g ConsumerGroupInfo) bool { return old[g.BrokerGroup] })
		if i < 0 {
			continue // no earlier broker group knows it: nothing to carry
		}
		s := v.BrokerGroups[i].Settings
		req := transport.SetConsumerGroupRequest{Subject: after.Subject, ConsumerGroup: consumerGroup, MaxDeliveries: &s.MaxDeliveries,
			RetryFirst: &s.RetryFirst, RetryMax: &s.RetryMax, AckWait: &s.AckWait, MaxInFlight: &s.MaxInFlight,
			IdleExpiry: &s.IdleExpiry, Start: transport.StartEarliest}
		for _, g := range after.BrokerGroups {
			if old[g.Name] {
				continue // the earlier ones keep what they hold
			}
			var res transport.ConsumerGroupResult
			if err := a.brokerCall(ctx, g, transport.TypeSetConsumerGroup, req, &res); err != nil {
				return err
			}
		}
	}
	return nil
}

// SetWritable drains brokerGroup (false: producers stop sending to it,
// consumers finish what it holds) or opens it again (true).
func (a *Client) SetWritable(ctx context.Context, brokerGroup string, writable bool) error {
	return a.call(ctx, transport.TypeSetWritable, transport.SetWritableRequest{BrokerGroup: brokerGroup, Writable: writable}, nil)
}

// groupClient returns a client for the nodes of brokerGroup (MetaGroup for
// the metaserver group), found through the metaserver.
func (a *Client) groupClient(ctx context.Context, brokerGroup string) (*transport.LeaderClient, error) {
	c, err := a.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	var servers []string
	if brokerGroup == MetaGroup {
		for _, m := range c.Meta.Members {
			if m.ClientAddr != "" {
				servers = append(servers, m.ClientAddr)
			}
		}
	}
	for _, g := range c.BrokerGroups {
		if g.Name == brokerGroup {
			for _, n := range g.Nodes {
				servers = append(servers, n.ClientAddr)
			}
		}
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("qmq: no group %q is known to the metaserver: start its first node with --bootstrap (and --meta), then join the others", brokerGroup)
	}
	return a.dial.NewLeaderClient(servers)
}

// groupCall sends a request to brokerGroup's leader. While no node
// it knows of leads (a group whose first node has only just started may
// not have every node registered yet), it asks the metaserver for the
// group's nodes again; a request that reached a leader is never repeated.
func (a *Client) groupCall(ctx context.Context, brokerGroup string, t transport.Type, req any) error {
	_, err := a.groupRequest(ctx, brokerGroup, t, req)
	return err
}

// groupRequest is groupCall, returning the leader's answer.
func (a *Client) groupRequest(ctx context.Context, brokerGroup string, t transport.Type, req any) ([]byte, error) {
	b, _ := json.Marshal(req)
	for {
		gc, err := a.groupClient(ctx, brokerGroup)
		if err != nil {
			return nil, sdk.Error(err)
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		body, err := callNeeding(actx, gc, t, req, b)
		cancel()
		gc.Close()
		if err == nil || ctx.Err() != nil || actx.Err() == nil {
			return body, sdk.Error(err)
		}
		if code := transport.CodeOf(err); code != transport.NotLeader && code != transport.Unavailable {
			return nil, sdk.Error(err)
		}
	}
}

// Join adds a node to brokerGroup (or to MetaGroup, the metaserver's) as
// a voter, through the group's leader.
func (a *Client) Join(ctx context.Context, brokerGroup, id, raftAddr, clientAddr string) error {
	return a.groupCall(ctx, brokerGroup, transport.TypeJoin, transport.JoinRequest{ID: id, RaftAddr: raftAddr, ClientAddr: clientAddr})
}

// Leave removes a node from brokerGroup (or MetaGroup), through the
// group's leader; a broker node is then forgotten by the metaserver too.
func (a *Client) Leave(ctx context.Context, brokerGroup, id string) error {
	if err := a.groupCall(ctx, brokerGroup, transport.TypeLeave, transport.LeaveRequest{ID: id}); err != nil {
		return err
	}
	c, err := a.Cluster(ctx)
	if err != nil {
		return err
	}
	if brokerGroup == MetaGroup || c.Meta.ID == "" { // the metaserver group, or a group without one
		return nil
	}
	return a.call(ctx, transport.TypeDeregister, transport.DeregisterRequest{BrokerGroup: brokerGroup, ID: id}, nil)
}

// TransferLeader asks the leader of brokerGroup (or MetaGroup) to hand
// leadership to node id, or to the most up-to-date voter when id is "",
// and waits until it is done.
func (a *Client) TransferLeader(ctx context.Context, brokerGroup, id string) error {
	return a.groupCall(ctx, brokerGroup, transport.TypeTransfer, transport.TransferRequest{ID: id})
}

// Delays returns every broker group's pending delayed messages, by hour of
// delivery and by subject, each from one node of the group (its leader
// when it answers).
func (a *Client) Delays(ctx context.Context) ([]BrokerGroupDelays, error) {
	c, err := a.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	var out []BrokerGroupDelays
	for _, g := range c.BrokerGroups {
		nodes := slices.Clone(g.Nodes)
		if i := slices.IndexFunc(nodes, func(n transport.NodeStatus) bool { return n.ID == g.Leader }); i > 0 {
			nodes[0], nodes[i] = nodes[i], nodes[0]
		}
		var errs []error
		for _, n := range nodes {
			var d BrokerGroupDelays
			if err := a.nodeCall(ctx, n.ClientAddr, transport.TypeDelays, &d); err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, d)
			errs = nil
			break
		}
		if len(errs) > 0 {
			return nil, fmt.Errorf("qmq: delays of group %s: %w", g.Name, errors.Join(errs...))
		}
	}
	return out, nil
}

// Close closes the Client's connections.
func (a *Client) Close() error {
	a.c.Close()
	return nil
}

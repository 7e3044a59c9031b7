package transport

import "github.com/qmqgo/qmq/internal/auth"

// The metaserver's requests are rare next to sends and pulls (clients cache
// routes), so their payloads are JSON like the membership requests.

// RouteRequest asks where a subject lives. The metaserver assigns a subject
// it has not seen to broker groups on this first use, unless Lookup is set
// (then an unknown subject is INVALID). ConsumerGroup, when set, records
// that group as a consumer of the subject. App is the application on whose
// behalf a broker forwards the request: a route or consumer group it
// creates counts towards that application's limits.
type RouteRequest struct {
	Subject       string `json:"subject"`
	ConsumerGroup string `json:"consumer_group,omitempty"`
	Lookup        bool   `json:"lookup,omitempty"`
	// App is the application asking, which the metaserver counts a new
	// subject or consumer group against. Nodes set it: a node with
	// authentication on sets the application of the connection asking,
	// and a node forwarding a request passes it on; anyone else's is
	// replaced.
	App string `json:"app,omitempty"`
	// Broker is set by a broker node recording ConsumerGroup for a pull
	// about to create it in its broker group (the node's group): the
	// record is provisional, and goes once every broker group holding it
	// reports it forgotten (ForgetConsumerGroupRequest.Broker). Only a node's
	// stands.
	Broker string `json:"broker,omitempty"`
}

// Route is where a subject lives: producers send to its writable groups,
// consumers pull from all of them.
type Route struct {
	Subject        string             `json:"subject"`
	BrokerGroups   []BrokerGroupRoute `json:"groups"`
	ConsumerGroups []string           `json:"consumer_groups,omitempty"`
	// ConsumerKnown says the consumer group the request named was
	// recorded before it: a hint only, since any lookup naming a group
	// records it, whether or not a broker group ever held it. The SDK asks
	// the broker groups whether they hold the group, and takes the hint
	// only when one does not answer (an SDK of an earlier release takes it
	// alone).
	ConsumerKnown bool `json:"consumer_known,omitempty"`
}

// BrokerGroupRoute is one broker group of a route.
type BrokerGroupRoute struct {
	Name string `json:"name"`
	// Writable is false while the group is drained (readonly).
	Writable bool `json:"writable"`
	// Available is false when the group's leader has missed heartbeats.
	Available bool `json:"available"`
	// Leader is the leader's client address, "" if unknown.
	Leader string `json:"leader,omitempty"`
	// Servers are the client addresses of the group's nodes.
	Servers []string `json:"servers"`
}

// RegisterRequest announces a broker node to the metaserver. Nodes send it
// on every start; it is idempotent.
type RegisterRequest struct {
	BrokerGroup string `json:"group"`
	ID          string `json:"id"`
	RaftAddr    string `json:"raft_addr"`
	ClientAddr  string `json:"client_addr"`
	HTTPAddr    string `json:"http_addr,omitempty"`
}

// DeregisterRequest makes the metaserver forget a broker node.
type DeregisterRequest struct {
	BrokerGroup string `json:"group"`
	ID          string `json:"id"`
}

// BrokerHeartbeat is a broker node's periodic report of its position. The
// metaserver keeps it in memory only.
type BrokerHeartbeat struct {
	Status Status `json:"status"`
	Load   Load   `json:"load"`
	// AppsVersion is the version of the applications the node holds
	// (auth.Table.Version; "" for none): the reply carries them when the
	// metaserver's differ.
	AppsVersion string `json:"apps_version,omitempty"`
}

// AppTable is every application of the cluster, as the metaserver sends
// them to brokers.
type AppTable struct {
	Apps []auth.App `json:"apps"`
}

// Load is what a broker group holds, reported by its leader; routing
// prefers groups that hold less.
type Load struct {
	Subjects     int   `json:"subjects"`
	MessageBytes int64 `json:"message_bytes"`
}

// HeartbeatReply tells a broker node what the metaserver decided for its
// group.
type HeartbeatReply struct {
	Writable bool `json:"writable"`
	// Unknown is true when the metaserver does not know the node (it was
	// deregistered, or the metaserver was rebuilt): register again.
	Unknown bool `json:"unknown,omitempty"`
	// Apps are the metaserver's applications when the heartbeat's
	// AppsVersion is not theirs; nil otherwise.
	Apps *AppTable `json:"apps,omitempty"`
	// Auth: the metaserver checks applications, so every broker must
	// (one that does not refuses clients until it is restarted with
	// --auth).
	Auth bool `json:"auth,omitempty"`
}

// AssignRequest routes a subject to more broker groups: the named ones, or
// as many more as needed (chosen by load) for Count groups in all. A route
// never loses a group, so consumers never miss what one holds; drain a
// group with SetWritableRequest instead.
type AssignRequest struct {
	Subject      string   `json:"subject"`
	BrokerGroups []string `json:"groups,omitempty"`
	Count        int      `json:"count,omitempty"`
}

// SetWritableRequest drains a broker group (Writable false: no new sends,
// consumers finish what it holds) or opens it again.
type SetWritableRequest struct {
	BrokerGroup string `json:"group"`
	Writable    bool   `json:"writable"`
}

// Cluster is the metaserver's view of the whole cluster.
type Cluster struct {
	// Meta is the answering metaserver leader's own status; its Members are
	// the metaserver group.
	Meta         Status              `json:"meta"`
	BrokerGroups []BrokerGroupStatus `json:"groups"`
	// Subjects is how many subjects have routes.
	Subjects int `json:"subjects"`
}

// BrokerGroupStatus is one broker group as the metaserver sees it.
type BrokerGroupStatus struct {
	Name      string       `json:"name"`
	Writable  bool         `json:"writable"`
	Available bool         `json:"available"`
	Leader    string       `json:"leader,omitempty"` // the leader's node id
	Term      uint64       `json:"term"`
	Subjects  int          `json:"subjects"` // subjects routed to the group
	Load      Load         `json:"load"`
	Nodes     []NodeStatus `json:"nodes"`
}

// NodeStatus is one broker node: what it registered and its last heartbeat.
type NodeStatus struct {
	ID         string `json:"id"`
	ClientAddr string `json:"client_addr"`
	RaftAddr   string `json:"raft_addr"`
	HTTPAddr   string `json:"http_addr,omitempty"`
	// State is the node's Raft state at its last heartbeat, or "Unknown".
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	// Lag is how many entries the node's applied index trails its group
	// leader's, both at their last heartbeats.
	Lag uint64 `json:"lag"`
	// Backlog is the node's Status.Backlog at its last heartbeat.
	Backlog int64 `json:"backlog"`
	// SeenMillis is how long ago its last heartbeat arrived; -1 if never.
	SeenMillis int64 `json:"seen_ms"`
	// TLS and Insecure are the node's Status.TLS and Status.Insecure at
	// its last heartbeat.
	TLS      bool `json:"tls"`
	Insecure bool `json:"insecure,omitempty"`
	// Refusing is the node's Status.Refusing at its last heartbeat: why it
	// serves no client.
	Refusing string `json:"refusing,omitempty"`
}

package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/qmqgo/qmq/transport"
)

// A broker group's configuration, for operators: the settings that decide
// what its state machine applies (retention, the dedup window, the pull
// and unacked bounds, the segment sizes). It is replicated state, the same
// on every node of the group: a node's own flags only seed a new group.

// BrokerGroupConfig is a broker group's configuration as one node's replica
// holds it.
type BrokerGroupConfig = transport.BrokerConfigInfo

// BrokerGroupConfigChanges names the settings of a broker group's
// configuration to change; nil ones stay.
type BrokerGroupConfigChanges = transport.SetBrokerConfigRequest

// BrokerGroupConfigs returns the configuration of brokerGroup as each of
// its nodes holds it, its leader's first. A node that does not answer is
// named in the error; the others' are returned all the same.
func (a *Client) BrokerGroupConfigs(ctx context.Context, brokerGroup string) ([]BrokerGroupConfig, error) {
	g, err := a.brokerGroup(ctx, brokerGroup)
	if err != nil {
		return nil, err
	}
	return a.brokerConfigs(ctx, g, true)
}

// BrokerGroupConfigOf returns the configuration of the broker group g of a
// Cluster as one of its nodes holds it: its leader, or the first other
// that answers.
func (a *Client) BrokerGroupConfigOf(ctx context.Context, g BrokerGroupStatus) (*BrokerGroupConfig, error) {
	out, err := a.brokerConfigs(ctx, g, false)
	if len(out) == 0 {
		return nil, err
	}
	return &out[0], nil
}

// SetBrokerGroupConfig changes the configuration of brokerGroup, through
// its leader, which checks the change against the bounds and against the
// rest of the configuration before proposing it; it returns the
// configuration as the leader holds it after the change.
func (a *Client) SetBrokerGroupConfig(ctx context.Context, brokerGroup string, changes BrokerGroupConfigChanges) (*BrokerGroupConfig, error) {
	body, err := a.groupRequest(ctx, brokerGroup, transport.TypeSetBrokerConfig, changes)
	if err != nil {
		return nil, err
	}
	var out BrokerGroupConfig
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("qmq: %s answer of broker group %s: %w", transport.TypeSetBrokerConfig, brokerGroup, err)
	}
	return &out, nil
}

// brokerGroup returns the metaserver's view of brokerGroup.
func (a *Client) brokerGroup(ctx context.Context, brokerGroup string) (BrokerGroupStatus, error) {
	c, err := a.Cluster(ctx)
	if err != nil {
		return BrokerGroupStatus{}, err
	}
	for _, g := range c.BrokerGroups {
		if g.Name == brokerGroup {
			return g, nil
		}
	}
	return BrokerGroupStatus{}, fmt.Errorf("qmq: no broker group %q is known to the metaserver", brokerGroup)
}

// brokerConfigs asks g's nodes, its leader first, for their configuration:
// every node, or with all false until one answers.
func (a *Client) brokerConfigs(ctx context.Context, g BrokerGroupStatus, all bool) ([]BrokerGroupConfig, error) {
	nodes := slices.Clone(g.Nodes)
	if i := slices.IndexFunc(nodes, func(n transport.NodeStatus) bool { return n.ID == g.Leader }); i > 0 {
		nodes[0], nodes[i] = nodes[i], nodes[0]
	}
	var out []BrokerGroupConfig
	var errs []error
	for _, n := range nodes {
		var c BrokerGroupConfig
		if err := a.nodeCall(ctx, n.ClientAddr, transport.TypeBrokerConfig, &c); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.ID, err))
			continue
		}
		out = append(out, c)
		if !all {
			return out, nil
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("qmq: broker configuration of group %s: %w", g.Name, errors.Join(errs...))
	}
	return out, nil
}

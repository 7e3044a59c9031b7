package qmq

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/qmqgo/qmq/transport"
)

// Status is one node's report of itself and its group.
type Status = transport.Status

// Admin runs operator requests against a broker group.
type Admin struct {
	c *client
}

// NewAdmin returns an Admin for the group at servers.
func NewAdmin(servers string) (*Admin, error) {
	c, err := newClient(servers)
	if err != nil {
		return nil, err
	}
	return &Admin{c: c}, nil
}

// Status asks the node at addr for its status (no redirect to the leader).
func (a *Admin) Status(ctx context.Context, addr string) (*Status, error) {
	conn, err := a.c.conn(ctx, addr)
	if err != nil {
		return nil, err
	}
	body, err := conn.Call(ctx, transport.TypeStatus, nil)
	if err != nil {
		return nil, err
	}
	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("qmq: status from %s: %w", addr, err)
	}
	return &st, nil
}

// Servers returns the addresses the Admin was given.
func (a *Admin) Servers() []string { return append([]string(nil), a.c.servers...) }

// Join adds a node to the group as a voter, through the group's leader.
func (a *Admin) Join(ctx context.Context, id, raftAddr, clientAddr string) error {
	b, _ := json.Marshal(transport.JoinRequest{ID: id, RaftAddr: raftAddr, ClientAddr: clientAddr})
	_, err := a.c.call(ctx, transport.TypeJoin, b)
	return err
}

// Leave removes a node from the group, through the group's leader.
func (a *Admin) Leave(ctx context.Context, id string) error {
	b, _ := json.Marshal(transport.LeaveRequest{ID: id})
	_, err := a.c.call(ctx, transport.TypeLeave, b)
	return err
}

// TransferLeader asks the group's leader to hand leadership to node id, or
// to the most up-to-date voter when id is "", and waits until it is done.
func (a *Admin) TransferLeader(ctx context.Context, id string) error {
	b, _ := json.Marshal(transport.TransferRequest{ID: id})
	_, err := a.c.call(ctx, transport.TypeTransfer, b)
	return err
}

// Close closes the Admin's connections.
func (a *Admin) Close() error {
	a.c.close()
	return nil
}

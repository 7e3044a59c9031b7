package server

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// raftStream is the Raft transport's stream layer: TCP like raft's own,
// but a node listening on a specific IP also dials its peers from that IP.
// Peers, and any proxy between them, then see which node a connection
// comes from; a node on a multi-homed host talks to its group from the one
// address it was given.
type raftStream struct {
	net.Listener
	advertise net.Addr
	dialer    net.Dialer
}

func (s *raftStream) Addr() net.Addr { return s.advertise }

func (s *raftStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := s.dialer
	d.Timeout = timeout
	return d.Dial("tcp", string(addr))
}

// newRaftTransport listens for Raft on bind and hands out advertise (the
// same address when empty): peers dial advertise, which a proxy may stand
// in front of.
func newRaftTransport(bind, advertise string, log hclog.Logger) (*raft.NetworkTransport, error) {
	if advertise == "" {
		advertise = bind
	}
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("server: raft address: %w", err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("server: raft address %s: give an IP address the other members can dial", advertise)
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("server: listen for raft: %w", err)
	}
	s := &raftStream{Listener: ln, advertise: adv}
	if local := ln.Addr().(*net.TCPAddr); !local.IP.IsUnspecified() {
		s.dialer.LocalAddr = &net.TCPAddr{IP: local.IP}
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: s, MaxPool: 8, Timeout: 10 * time.Second, Logger: log,
	}), nil
}

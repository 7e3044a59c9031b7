// Package testbroker is for tests: a one-node cluster in one
// transport.Server, which routes every subject to itself, stores what is
// sent and hands it to pulls. It stands in for a node where a test is
// about how a client connects (TLS) rather than about the broker.
package testbroker

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// Broker answers route, send, pull, ack, heartbeat and status requests.
// Every consumer group sees every message, numbered from 0 in the order
// sent; a pull hands out those from its From on.
type Broker struct {
	Addr string // its client address on 127.0.0.1

	mu   sync.Mutex
	msgs []*message.Message
}

// Start serves a Broker on 127.0.0.1, over TLS with tlsConfig unless it is
// nil, until the test ends.
func Start(tb testing.TB, tlsConfig *tls.Config) *Broker {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	b := &Broker{Addr: lis.Addr().String()}
	srv := &transport.Server{Handler: b.handle, TLS: tlsConfig}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	tb.Cleanup(func() { srv.Close(); <-served })
	return b
}

// Sent is the number of messages stored.
func (b *Broker) Sent() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs)
}

func (b *Broker) handle(ctx context.Context, typ transport.Type, p []byte) ([]byte, error) {
	switch typ {
	case transport.TypeRoute:
		var req transport.RouteRequest
		if err := json.Unmarshal(p, &req); err != nil {
			return nil, err
		}
		return json.Marshal(transport.Route{Subject: req.Subject, BrokerGroups: []transport.BrokerGroupRoute{
			{Name: "g1", Servers: []string{b.Addr}, Leader: b.Addr, Writable: true, Available: true}}})
	case transport.TypeSend:
		req, err := transport.DecodeSendRequest(p)
		if err != nil {
			return nil, err
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		var resp transport.SendResponse
		for _, m := range req.Messages {
			b.msgs = append(b.msgs, m)
			resp.Results = append(resp.Results, transport.SendResult{Status: transport.SendAppended})
		}
		return resp.Encode(), nil
	case transport.TypePull:
		req, err := transport.DecodePullRequest(p)
		if err != nil {
			return nil, err
		}
		return b.pull(ctx, req).Encode(), nil
	case transport.TypeAck:
		req, err := transport.DecodeAckRequest(p)
		if err != nil {
			return nil, err
		}
		return (&transport.AckResponse{AckPos: req.Ranges[len(req.Ranges)-1].Last + 1}).Encode(), nil
	case transport.TypeHeartbeat:
		return nil, nil
	case transport.TypeStatus:
		return json.Marshal(transport.Status{ID: "n1", Group: "g1", State: "Leader", LeaderAddr: b.Addr})
	}
	return nil, transport.Errorf(transport.UnknownType, "the test broker does not answer %s", typ)
}

// pull answers with the messages from req.From on, waiting up to req.Wait
// for one.
func (b *Broker) pull(ctx context.Context, req *transport.PullRequest) *transport.PullResponse {
	resp := &transport.PullResponse{Epoch: 1, Version: req.Version}
	ctx, cancel := context.WithTimeout(ctx, req.Wait)
	defer cancel()
	for {
		b.mu.Lock()
		for seq := max(req.From, 0); seq < int64(len(b.msgs)) && len(resp.Messages) < req.Max; seq++ {
			resp.Messages = append(resp.Messages, transport.PulledMessage{PullSeq: seq, Deliveries: 1, Message: b.msgs[seq]})
		}
		b.mu.Unlock()
		if len(resp.Messages) > 0 {
			return resp
		}
		select {
		case <-ctx.Done():
			return resp
		case <-time.After(5 * time.Millisecond):
		}
	}
}

package qmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/qmqgo/qmq/transport"
)

// DefaultServer is the address `qmqd dev` listens on.
const DefaultServer = "127.0.0.1:6222"

// Error is an error answered by a broker, with its wire code; see
// transport.Code for the codes and which are retriable.
type Error = transport.Error

// maxElectionBackoff caps the pause between retries while a group has no
// leader (NOT_LEADER without an address, or its nodes unreachable).
const maxElectionBackoff = 100 * time.Millisecond

// client holds connections to a broker group's nodes and finds the leader.
// Requests go to the leader; NOT_LEADER answers redirect, and retriable
// failures are retried (with backoff) until the context ends.
type client struct {
	servers []string

	mu     sync.Mutex
	conns  map[string]*transport.Conn
	leader string // best guess; "" when unknown
	next   int    // round-robin over servers when the leader is unknown
	closed bool
}

func newClient(servers string) (*client, error) {
	var list []string
	for _, s := range strings.Split(servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			list = append(list, s)
		}
	}
	if len(list) == 0 {
		return nil, errors.New("qmq: no server address given")
	}
	return &client{servers: list, conns: map[string]*transport.Conn{}}, nil
}

// target returns the address to try next.
func (c *client) target() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader != "" {
		return c.leader
	}
	addr := c.servers[c.next%len(c.servers)]
	c.next++
	return addr
}

func (c *client) setLeader(addr string) {
	c.mu.Lock()
	c.leader = addr
	c.mu.Unlock()
}

// forget drops a failed address: its connection, and the leader guess if
// it was the leader.
func (c *client) forget(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn := c.conns[addr]; conn != nil {
		conn.Close()
		delete(c.conns, addr)
	}
	if c.leader == addr {
		c.leader = ""
	}
}

func (c *client) conn(ctx context.Context, addr string) (*transport.Conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("qmq: client closed")
	}
	conn := c.conns[addr]
	c.mu.Unlock()
	if conn != nil {
		select {
		case <-conn.Done():
			c.forget(addr)
		default:
			return conn, nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := transport.Dial(dctx, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return nil, errors.New("qmq: client closed")
	}
	if old := c.conns[addr]; old != nil {
		conn.Close()
		return old, nil
	}
	c.conns[addr] = conn
	return conn, nil
}

// call sends a request to the leader, following redirects and retrying
// retriable failures until ctx ends. A leader change costs latency, not an
// error.
func (c *client) call(ctx context.Context, t transport.Type, payload []byte) ([]byte, error) {
	backoff := 10 * time.Millisecond
	var last error
	for attempt := 0; ; attempt++ {
		addr := c.target()
		conn, err := c.conn(ctx, addr)
		var body []byte
		if err == nil {
			body, err = conn.Call(ctx, t, payload)
		}
		if err == nil {
			return body, nil
		}
		var e *transport.Error
		if !errors.As(err, &e) {
			return nil, err
		}
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			return nil, fmt.Errorf("qmq: %s: %w (last error: %v)", t, ctx.Err(), last)
		}
		last = err
		switch {
		case e.Code == transport.NotLeader && e.Leader != "" && e.Leader != addr:
			c.setLeader(e.Leader)
			continue // redirect at once
		case e.Code == transport.NotLeader:
			c.setLeader("") // election under way: try others after a pause
		case e.Code == transport.Unavailable:
			if conn == nil || isDone(conn) {
				c.forget(addr) // the connection itself failed
			} else {
				c.setLeader("") // the node answered, but cannot serve now
			}
		case !e.Retriable():
			return nil, err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, fmt.Errorf("qmq: %s: %w (last error: %v)", t, ctx.Err(), last)
		}
		// While a group elects a leader, poll often: the wait after the
		// election ends is pure added latency. Other failures back off further.
		limit := time.Second
		if e.Code == transport.NotLeader || e.Code == transport.Unavailable {
			limit = maxElectionBackoff
		}
		backoff = min(backoff*2, limit)
	}
}

func (c *client) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for addr, conn := range c.conns {
		conn.Close()
		delete(c.conns, addr)
	}
}

func isDone(conn *transport.Conn) bool {
	select {
	case <-conn.Done():
		return true
	default:
		return false
	}
}

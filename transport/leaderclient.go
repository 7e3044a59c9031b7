package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmqgo/qmq/internal/version"
)

// maxElectionBackoff caps the pause between retries while a group has no
// leader (NOT_LEADER without an address, or its nodes unreachable).
const maxElectionBackoff = 100 * time.Millisecond

// LeaderClient holds connections to the nodes of one Raft group (a broker
// group or the metaserver group) and finds its leader. Requests go to the
// leader; NOT_LEADER answers redirect, and retriable failures are retried
// (with backoff) until the context ends. It is safe for concurrent use.
type LeaderClient struct {
	dial    Dialer
	servers []string
	reached atomic.Bool // a connection to one of its nodes has been made
	patient atomic.Bool // never reports ErrUnreachable (KeepTrying)

	mu     sync.Mutex
	conns  map[string]*Conn
	leader string               // best guess; "" when unknown
	next   int                  // round-robin over servers when the leader is unknown
	failed map[string]time.Time // when a connection to an address last failed (forget)
	closed bool
}

// shunFailed is how long an address whose connection failed is passed
// over while others may serve: a host cut off costs a dial timeout each
// time it is tried, and the round robin would try it every third call. A
// node's NOT_LEADER answer naming it as the leader ends the shunning, as
// does a connection to it dialled again.
const shunFailed = 5 * time.Second

// SplitServers splits a comma-separated address list, dropping blanks.
func SplitServers(servers string) []string {
	var list []string
	for _, s := range strings.Split(servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			list = append(list, s)
		}
	}
	return list
}

// NewLeaderClient returns a client for the group whose nodes answer at
// servers (any subset will do: NOT_LEADER answers name the leader). Its
// connections are d's.
func (d Dialer) NewLeaderClient(servers []string) (*LeaderClient, error) {
	if len(servers) == 0 {
		return nil, errors.New("qmq: no server address given")
	}
	for _, s := range servers {
		if err := checkAddr(s); err != nil {
			return nil, err
		}
	}
	return &LeaderClient{dial: d, servers: append([]string(nil), servers...), conns: map[string]*Conn{}, failed: map[string]time.Time{}}, nil
}

// checkAddr refuses an address that is not HOST:PORT.
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
			err = fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
	}
	if err != nil {
		return fmt.Errorf("qmq: malformed server address %q (want HOST:PORT): %v", addr, err)
	}
	return nil
}

// ErrUnreachable means no node of a group could be connected to: the
// address is wrong, or nothing listens there.
var ErrUnreachable = errors.New("cannot reach")

// unreachableAfter is how long a client that has never reached any node
// of a group tries before it reports ErrUnreachable. Once it has reached
// one, or for addresses a route gave (KeepTrying), it rides out any
// outage until its context ends.
const unreachableAfter = 2 * time.Second

// KeepTrying makes c try until each call's context ends even if it never
// reached a node: for addresses a route gave (a group that is down for a
// while), not a user (a wrong address).
func (c *LeaderClient) KeepTrying() { c.patient.Store(true) }

// Servers returns the addresses the client tries when it knows no leader.
func (c *LeaderClient) Servers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.servers...)
}

// SetServers replaces the addresses to try (the group's membership
// changed) and takes leader as the leader's address unless it is "".
func (c *LeaderClient) SetServers(servers []string, leader string) {
	if len(servers) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.servers = append(c.servers[:0:0], servers...)
	if leader != "" {
		c.leader = leader
	}
}

// target returns the address to try next: the leader's if known and not
// shunned, else the next in turn of the servers not shunned (of all, if
// every one is).
func (c *LeaderClient) target() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader != "" && !c.shunnedLocked(c.leader) {
		return c.leader
	}
	for range c.servers {
		addr := c.servers[c.next%len(c.servers)]
		c.next++
		if !c.shunnedLocked(addr) {
			return addr
		}
	}
	addr := c.servers[c.next%len(c.servers)]
	c.next++
	return addr
}

// shunnedLocked reports whether addr failed less than shunFailed ago.
func (c *LeaderClient) shunnedLocked(addr string) bool {
	at, ok := c.failed[addr]
	if ok && time.Since(at) >= shunFailed {
		delete(c.failed, addr)
		return false
	}
	return ok
}

func (c *LeaderClient) setLeader(addr string) {
	c.mu.Lock()
	c.leader = addr
	c.mu.Unlock()
}

// redirected takes addr as the leader, as a node's NOT_LEADER answer
// named it: it is tried next even if its connection failed lately.
func (c *LeaderClient) redirected(addr string) {
	c.mu.Lock()
	c.leader = addr
	delete(c.failed, addr)
	c.mu.Unlock()
}

// forget drops a failed address: its connection, and the leader guess if
// it was the leader; it is shunned for a while.
func (c *LeaderClient) forget(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed[addr] = time.Now()
	if conn := c.conns[addr]; conn != nil {
		conn.Close()
		delete(c.conns, addr)
	}
	if c.leader == addr {
		c.leader = ""
	}
}

// Conn returns the connection to addr, dialling it if needed.
func (c *LeaderClient) Conn(ctx context.Context, addr string) (*Conn, error) {
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
	conn, err := c.dial.Dial(dctx, addr)
	if err != nil {
		return nil, err
	}
	c.reached.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failed, addr) // reached again: no longer passed over
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

// Call sends a request to the leader, following redirects and retrying
// retriable failures until ctx ends. A leader change costs latency, not an
// error. An error that is not an *Error, such as ErrTLS, is returned at
// once.
func (c *LeaderClient) Call(ctx context.Context, t Type, payload []byte) ([]byte, error) {
	return c.call(ctx, t, payload, nil)
}

// CallNeeding is Call of a request that needs version need (what names
// it for the error): it is sent only on a connection to a node that
// supports need, and refused with an UNSUPPORTED *Error by the first that
// does not (NeedVersion), since a node of an older release would ignore
// what it does not know or refuse the request unclearly.
func (c *LeaderClient) CallNeeding(ctx context.Context, need version.Number, what string, t Type, payload []byte) ([]byte, error) {
	return c.call(ctx, t, payload, func(conn *Conn) error { return NeedVersion(ctx, conn, need, what) })
}

// call is Call, checking each connection with check (if set) before the
// request goes on it.
func (c *LeaderClient) call(ctx context.Context, t Type, payload []byte, check func(*Conn) error) ([]byte, error) {
	backoff := 10 * time.Millisecond
	var last error
	start := time.Now()
	for attempt := 0; ; attempt++ {
		addr := c.target()
		conn, err := c.Conn(ctx, addr)
		var body []byte
		if err == nil && check != nil {
			err = check(conn)
		}
		if err == nil {
			body, err = conn.Call(ctx, t, payload)
		}
		if err == nil {
			return body, nil
		}
		var e *Error
		if !errors.As(err, &e) {
			return nil, err
		}
		if conn == nil && !c.reached.Load() && !c.patient.Load() && time.Since(start) >= unreachableAfter {
			// Never connected: a wrong address, or no server running.
			_, cause, _ := strings.Cut(e.Message, ": dial tcp "+addr+": ")
			if cause == "" {
				cause = e.Message
			}
			return nil, fmt.Errorf("qmq: %w %s: %s: is qmqd running?", ErrUnreachable, strings.Join(c.Servers(), ", "),
				strings.TrimPrefix(cause, "connect: "))
		}
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			return nil, fmt.Errorf("qmq: %s: %w (last error: %w)", t, ctx.Err(), last)
		}
		last = err
		switch {
		case e.Code == NotLeader && e.Leader != "" && e.Leader != addr:
			c.redirected(e.Leader)
			continue // redirect at once
		case e.Code == NotLeader:
			c.setLeader("") // election under way: try others after a pause
		case e.Code == Unavailable:
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
			return nil, fmt.Errorf("qmq: %s: %w (last error: %w)", t, ctx.Err(), last)
		}
		// While a group elects a leader, poll often: the wait after the
		// election ends is pure added latency. Other failures back off further.
		limit := time.Second
		if e.Code == NotLeader || e.Code == Unavailable {
			limit = maxElectionBackoff
		}
		backoff = min(backoff*2, limit)
	}
}

// Close closes every connection; later calls fail.
func (c *LeaderClient) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for addr, conn := range c.conns {
		conn.Close()
		delete(c.conns, addr)
	}
}

func isDone(conn *Conn) bool {
	select {
	case <-conn.Done():
		return true
	default:
		return false
	}
}

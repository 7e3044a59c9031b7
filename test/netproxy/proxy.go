// Package netproxy is a TCP proxy for tests that cuts, drops and slows
// connections on command: the chaos run puts one in front of every node's
// client and Raft ports, and the SDK's tests lose a broker's replies.
package netproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from its listening address to a target,
// and cuts or slows them on command. It tells connections apart by their
// source IP: in the chaos run each node listens and dials from a loopback
// IP of its own (127.0.0.x), so a proxy knows which node a connection
// comes from.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	refuse  func(srcIP string) bool // nil: refuse nothing
	dropIn  func(srcIP string) bool // drop what these sources send; nil: none
	dropOut func(srcIP string) bool // drop what is sent back to these sources; nil: none
	latency time.Duration           // added to every chunk forwarded, each way
	dropped int64                   // bytes discarded by Drop
	conns   map[*proxied]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type proxied struct {
	srcIP          string
	client, server net.Conn
	cut            chan struct{} // closed by close: a chunk held by the latency is dropped at once
	once           sync.Once
}

func (p *proxied) close() {
	p.client.Close()
	p.server.Close()
	p.once.Do(func() { close(p.cut) })
}

// New listens on listen and forwards to target.
func New(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*proxied]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Refuse makes the proxy refuse (and cut) connections from the source IPs
// refuse says yes to; nil lets everything through again.
func (p *Proxy) Refuse(refuse func(srcIP string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = refuse
	for c := range p.conns {
		if refuse != nil && refuse(c.srcIP) {
			c.close()
		}
	}
}

// Drop makes the proxy discard, rather than forward, the bytes of one
// direction on connections from the sources drop says yes to, keeping the
// connections open: a one-way cut. toTarget discards what those sources
// send (their requests vanish); otherwise what comes back to them (their
// answers vanish). nil forwards that direction again.
func (p *Proxy) Drop(drop func(srcIP string) bool, toTarget bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if toTarget {
		p.dropIn = drop
	} else {
		p.dropOut = drop
	}
}

// Dropped returns how many bytes Drop has discarded so far.
func (p *Proxy) Dropped() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Conns returns how many connections the proxy forwards now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// SetLatency delays every chunk forwarded, in both directions, by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Close stops listening and cuts every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		src := client.RemoteAddr().(*net.TCPAddr).IP.String()
		p.mu.Lock()
		refused := p.closed || (p.refuse != nil && p.refuse(src))
		p.mu.Unlock()
		if refused {
			client.Close()
			continue
		}
		p.wg.Add(1)
		go p.forward(client, src)
	}
}

func (p *Proxy) forward(client net.Conn, src string) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	c := &proxied{srcIP: src, client: client, server: server, cut: make(chan struct{})}
	p.mu.Lock()
	if p.closed || (p.refuse != nil && p.refuse(src)) {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.pipe(c, server, client, true); c.close() }()
	go func() { defer both.Done(); p.pipe(c, client, server, false); c.close() }()
	both.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// pipe copies src to dst, chunk by chunk, each after the current latency,
// or discards the chunks while that direction is dropped for srcIP (the
// connection's client); toTarget says which direction this is.
func (p *Proxy) pipe(c *proxied, dst, src net.Conn, toTarget bool) {
	srcIP := c.srcIP
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.latency
			drop := p.dropOut
			if toTarget {
				drop = p.dropIn
			}
			dropped := drop != nil && drop(srcIP)
			p.mu.Unlock()
			if d > 0 {
				select {
				case <-time.After(d):
				case <-c.cut:
					return
				}
			}
			if dropped {
				p.mu.Lock()
				p.dropped += int64(n)
				p.mu.Unlock()
				continue
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a cut: the caller closes both sides
		}
	}
}

package transport

import (
	"net"
	"time"
)

// A peer that goes silent (its host cut off, its link down, no RST ever
// coming) must fail a client's connection soon, or every call on it waits
// out its whole timeout and the next one goes to the same dead peer:
// after a leader's host was cut off, a consumer's long polls sat 10 s at a
// time on the old leader while a new one served. TCP keepalive bounds the
// silence of a connection with nothing unacknowledged on it (a long poll,
// once its request is acknowledged): keepaliveIdle without a byte
// received, then a probe each keepaliveInterval, keepaliveCount
// unanswered ones and it fails. A failed connection fails its calls as
// Unavailable, and the LeaderClient asks the other nodes. A call whose
// bytes go unacknowledged is ended by its own deadline.
//
// TCP_USER_TIMEOUT is left alone, on purpose. It would bound unacknowledged
// bytes too, but Linux applies it to a closed window as well: a server
// that stops reading a connection (Server.MaxInFlight, MaxInFlightBytes:
// its backpressure) while the client has more to send than the socket
// buffers hold would fail the connection, and every request on it, once
// the stall outlasted the timeout; and set, it replaces the keepalive
// bound, so it cannot be longer than the silence we mean to bound.
//
// A healthy connection costs a probe of a few bytes a second while idle.
// A slow server is not silence: its kernel acknowledges what it is sent,
// and answers the probes, however long the request takes.
const (
	keepaliveIdle     = time.Second
	keepaliveInterval = time.Second
	keepaliveCount    = 2
	silenceTimeout    = keepaliveIdle + keepaliveCount*keepaliveInterval
)

// silenceBounded makes the idle connections nd dials fail after
// silenceTimeout of a silent peer.
func silenceBounded(nd *net.Dialer) {
	nd.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: keepaliveIdle, Interval: keepaliveInterval, Count: keepaliveCount}
}

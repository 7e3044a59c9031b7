package transport

import (
	"net"
	"time"
)

// A peer that goes silent (its host cut off, its link down, no RST ever
// coming) must fail a client's connection soon, or every call on it waits
// out its whole timeout and the next one goes to the same dead peer:
// after a leader's host was cut off, a consumer's long polls sat 10 s at a
// time on the old leader while a new one served. Two kernel timers bound
// the silence instead: TCP keepalive probes an idle connection
// (keepaliveIdle without a byte received, then a probe each
// keepaliveInterval, keepaliveCount unanswered ones and it fails), and
// TCP_USER_TIMEOUT (on Linux) fails one whose bytes sent stay
// unacknowledged for silenceTimeout. A failed connection fails its calls
// as Unavailable, and the LeaderClient asks the other nodes.
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

// silenceBounded makes the connections nd dials fail after silenceTimeout
// of a silent peer.
func silenceBounded(nd *net.Dialer) {
	nd.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: keepaliveIdle, Interval: keepaliveInterval, Count: keepaliveCount}
	nd.Control = setUserTimeout
}

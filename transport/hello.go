package transport

import (
	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
)

// MaxSecret bounds the secret a Hello carries.
const MaxSecret = limits.MaxSecret

// HelloRequest: version | app string | secret string
//
// It names the application a connection works for and proves it with the
// application's secret; a client sends it first on each connection and
// waits for its answer. A node with authentication on answers
// UNAUTHENTICATED to an unknown application or a wrong secret, and to any
// other request on a connection that has not said Hello (a node
// certificate aside). A node without authentication accepts it unchecked.
// The secret crosses the connection as it is: authentication belongs on
// TLS connections.
type HelloRequest struct {
	App, Secret string
}

// Encode returns the payload.
func (q *HelloRequest) Encode() []byte {
	return binenc.AppendString(binenc.AppendString(header(), q.App), q.Secret)
}

// DecodeHelloRequest decodes a hello payload.
func DecodeHelloRequest(b []byte) (*HelloRequest, error) {
	r := newReader(b)
	q := &HelloRequest{App: r.String(limits.MaxName), Secret: r.String(MaxSecret)}
	return q, done("hello", r)
}

// Credentials are an application's code and secret, sent in a Hello on
// every connection a Dialer opens.
type Credentials struct {
	App, Secret string
}

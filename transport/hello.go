package transport

import (
	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/version"
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

// HelloResponse: version | min uint32 | max uint32
//
// The answer to every Hello: the version Numbers the node's build
// supports (internal/version), from which a client knows what it may
// ask of it (a request or a field of a newer Number is refused by the
// client, UNSUPPORTED, rather than sent). A node of the release before
// version gates answers with an empty body: V1 alone. A later payload
// version may append fields; a reader takes the range and skips them.
type HelloResponse struct {
	Versions version.Range
}

// Encode returns the payload.
func (r *HelloResponse) Encode() []byte {
	return binenc.AppendUint32(binenc.AppendUint32(header(), uint32(r.Versions.Min)), uint32(r.Versions.Max))
}

// DecodeHelloResponse decodes a Hello's answer: V1..V1 for an empty one.
func DecodeHelloResponse(b []byte) (*HelloResponse, error) {
	if len(b) == 0 {
		return &HelloResponse{Versions: version.Range{}.OrV1()}, nil
	}
	r := binenc.NewReader(b)
	v := r.Byte()
	out := &HelloResponse{Versions: version.Range{Min: version.Number(r.Uint32()), Max: version.Number(r.Uint32())}}
	if err := r.Err(); err != nil {
		return nil, Errorf(Invalid, "hello answer: %v", err)
	}
	switch {
	case v == 0:
		return nil, Errorf(Invalid, "hello answer: payload version 0")
	case v == payloadVersion && r.Remaining() > 0:
		return nil, Errorf(Invalid, "hello answer: %d trailing bytes", r.Remaining())
	case out.Versions.Min < version.V1 || out.Versions.Max < out.Versions.Min:
		return nil, Errorf(Invalid, "hello answer: versions %s", out.Versions)
	}
	return out, nil
}

// Credentials are an application's code and secret, sent in a Hello on
// every connection a Dialer opens.
type Credentials struct {
	App, Secret string
}

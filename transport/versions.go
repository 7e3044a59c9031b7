package transport

import (
	"context"
	"fmt"

	"github.com/qmqgo/qmq/internal/version"
)

// Versions returns the version Numbers the node at the other end
// supports, from its answer to a Hello: the Dialer's, with Credentials,
// or else one empty Hello (no application) that Versions sends the first
// time it is asked, once per connection. A node of the release before
// version gates answers a Hello emptily, and one that does not know the
// request says UNKNOWN_TYPE: either supports V1 alone. Other failures
// are returned and not remembered (an UNAUTHENTICATED from a node that
// checks applications, for a connection that named none).
func (c *Conn) Versions(ctx context.Context) (version.Range, error) {
	c.vmu.Lock()
	defer c.vmu.Unlock()
	if c.versions != nil {
		return *c.versions, nil
	}
	r := version.Range{}.OrV1()
	body, err := c.Call(ctx, TypeHello, (&HelloRequest{}).Encode())
	switch {
	case CodeOf(err) == UnknownType:
	case err != nil:
		return version.Range{}, err
	default:
		h, err := DecodeHelloResponse(body)
		if err != nil {
			return version.Range{}, fmt.Errorf("qmq: %s: %w", c.addr, err)
		}
		r = h.Versions
	}
	c.versions = &r
	return r, nil
}

// NeedVersion returns an UNSUPPORTED *Error if the node at the other end
// of conn supports no version as high as need, which what (a feature, as
// a user names it) needs; the error says what to do.
func NeedVersion(ctx context.Context, conn *Conn, need version.Number, what string) error {
	r, err := conn.Versions(ctx)
	if err != nil {
		return err
	}
	if r.Max < need {
		return Errorf(Unsupported, "node %s runs a release that supports versions %s; %s needs version %d: upgrade it",
			conn.addr, r, what, need)
	}
	return nil
}

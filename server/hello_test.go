package server

import (
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/transport"
)

// Every node answers a Hello with the versions its build supports, with
// authentication off too (an empty Hello): a client learns from it what
// it may ask.
func TestHelloAnswersTheBuildsVersions(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	m := startMeta(t, "m1", true)
	ctx := ctxFor(t, 10*time.Second)
	for _, addr := range []string{n.ClientAddr(), m.ClientAddr()} {
		conn, err := transport.Dial(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		body, err := conn.Call(ctx, transport.TypeHello, (&transport.HelloRequest{}).Encode())
		if err != nil {
			t.Fatal(err)
		}
		h, err := transport.DecodeHelloResponse(body)
		if err != nil || h.Versions != version.Build() {
			t.Errorf("%s answers a hello with %x: %+v, %v", addr, body, h, err)
		}
		if r, err := conn.Versions(ctx); err != nil || r != version.Build() {
			t.Errorf("%s: versions %s, %v", addr, r, err)
		}
		conn.Close()
	}
}

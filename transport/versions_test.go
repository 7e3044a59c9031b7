package transport

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/version"
)

func TestHelloResponseRoundTripAndLimits(t *testing.T) {
	for _, r := range []version.Range{{Min: 1, Max: 1}, {Min: 1, Max: 2}, {Min: 3, Max: 1 << 31}} {
		got, err := DecodeHelloResponse((&HelloResponse{Versions: r}).Encode())
		if err != nil || got.Versions != r {
			t.Errorf("%s: decoded %+v, %v", r, got, err)
		}
	}
	if got, err := DecodeHelloResponse(nil); err != nil || got.Versions != (version.Range{Min: 1, Max: 1}) {
		t.Errorf("empty answer (a release before version gates): %+v, %v", got, err)
	}
	later := append([]byte{2}, (&HelloResponse{Versions: version.Range{Min: 1, Max: 3}}).Encode()[1:]...)
	if got, err := DecodeHelloResponse(append(later, 7, 7)); err != nil || got.Versions != (version.Range{Min: 1, Max: 3}) {
		t.Errorf("a later payload version with more fields: %+v, %v", got, err)
	}
	good := (&HelloResponse{Versions: version.Range{Min: 1, Max: 2}}).Encode()
	for name, b := range map[string][]byte{
		"short":             good[:len(good)-1],
		"trailing":          append(good[:len(good):len(good)], 0),
		"payload version 0": append([]byte{0}, good[1:]...),
		"min 0":             (&HelloResponse{Versions: version.Range{Min: 0, Max: 2}}).Encode(),
		"max under min":     (&HelloResponse{Versions: version.Range{Min: 2, Max: 1}}).Encode(),
	} {
		if got, err := DecodeHelloResponse(b); err == nil || CodeOf(err) != Invalid {
			t.Errorf("%s: %+v, %v; want INVALID", name, got, err)
		}
	}
}

// Conn.Versions asks with one Hello per connection, whatever the answer:
// a range, an empty answer or UNKNOWN_TYPE (both V1 alone); a Dialer
// with credentials learns it from its own Hello and sends none more.
func TestConnVersionsAsksOncePerConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func() ([]byte, error)
		want  version.Range
	}{
		{"range", func() ([]byte, error) { return (&HelloResponse{Versions: version.Range{Min: 1, Max: 7}}).Encode(), nil }, version.Range{Min: 1, Max: 7}},
		{"empty", func() ([]byte, error) { return nil, nil }, version.Range{Min: 1, Max: 1}},
		{"unknown type", func() ([]byte, error) { return nil, Errorf(UnknownType, "unknown request type 3") }, version.Range{Min: 1, Max: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hellos atomic.Int32
			_, addr := startServer(t, func(ctx context.Context, typ Type, p []byte) ([]byte, error) {
				if typ == TypeHello {
					hellos.Add(1)
					return tc.reply()
				}
				return nil, nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, d := range []Dialer{{}, {Credentials: &Credentials{App: "a", Secret: "s"}}} {
				hellos.Store(0)
				conn, err := d.Dial(ctx, addr)
				if err != nil {
					if d.Credentials != nil && tc.name == "unknown type" {
						continue // a Hello with credentials to a node that knows none fails the dial
					}
					t.Fatal(err)
				}
				for range 3 {
					r, err := conn.Versions(ctx)
					if err != nil || r != tc.want {
						t.Fatalf("credentials %v: versions %s, %v; want %s", d.Credentials != nil, r, err, tc.want)
					}
				}
				if n := hellos.Load(); n != 1 {
					t.Errorf("credentials %v: %d hellos on one connection, want 1", d.Credentials != nil, n)
				}
				err = NeedVersion(ctx, conn, 2, "a message's timeline")
				if tc.want.Max >= 2 {
					if err != nil {
						t.Errorf("need 2 of %s: %v", tc.want, err)
					}
				} else if CodeOf(err) != Unsupported || err.Error() != "qmq: UNSUPPORTED: node "+addr+
					" runs a release that supports versions 1-1; a message's timeline needs version 2: upgrade it" {
					t.Errorf("need 2 of %s: %v", tc.want, err)
				}
				conn.Close()
			}
		})
	}
}

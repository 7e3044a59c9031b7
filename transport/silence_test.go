package transport

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestStalledServerKeepsItsConnections: a server that stops reading a
// connection (its backpressure: MaxInFlight requests being handled) for
// longer than the silence bound, while the client has more to send than
// the socket buffers hold, slows the client and never fails it. (With
// TCP_USER_TIMEOUT at the silence bound, the kernel counted the closed
// window against it: the connection failed 3.3 s into the stall, and
// with it every request it carried.)
func TestStalledServerKeepsItsConnections(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{})
	s := &Server{MaxInFlight: 1, Handler: func(ctx context.Context, typ Type, p []byte) ([]byte, error) {
		if string(p) == "block" {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return p, nil
		}
		return p[:1], nil
	}}
	addr := serve(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	blocked := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, TypeStatus, []byte("block"))
		blocked <- err
	}()
	<-started
	eventually(t, "the connection's reader waiting for its one request", func() bool { return s.Stats().InFlightFull >= 1 })
	// More than loopback's socket buffers hold: the server reads none of
	// it while the first request is handled, and the window closes.
	big := bytes.Repeat([]byte{'x'}, DefaultMaxFrame-1024)
	done := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, TypeStatus, big)
		done <- err
	}()
	stall := time.NewTimer(silenceTimeout + 2*time.Second)
	select {
	case err := <-done:
		t.Fatalf("the large request ended while the server was not reading: %v", err)
	case <-stall.C:
	}
	close(release)
	if err := <-blocked; err != nil {
		t.Fatalf("the request the server held: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the request sent while the server was not reading: %v", err)
	}
}

package transport

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestRequestsPerConnection: a connection with MaxInFlight requests being
// handled is not read until one finishes (its next request waits, and the
// wait is counted), while another connection is served meanwhile.
func TestRequestsPerConnection(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	s := &Server{MaxInFlight: 2, Handler: func(ctx context.Context, typ Type, p []byte) ([]byte, error) {
		if string(p) == "block" {
			started.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return p, nil
	}}
	addr := serve(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	busy, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	done := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := busy.Call(ctx, TypeStatus, []byte("block"))
			done <- err
		}()
	}
	eventually(t, "two requests handled and the third waiting", func() bool {
		return started.Load() == 2 && s.Stats().InFlightFull >= 1
	})
	other, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if b, err := other.Call(ctx, TypeStatus, []byte("quick")); err != nil || string(b) != "quick" {
		t.Fatalf("another connection while the first is full: %q, %v", b, err)
	}
	if n := started.Load(); n != 2 {
		t.Fatalf("%d requests of the full connection handled, want 2", n)
	}
	close(release)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := started.Load(); n != 3 {
		t.Fatalf("%d requests handled in the end, want 3", n)
	}
}

// TestIdentifyTimeout: a connection whose peer has not identified itself
// within IdentifyTimeout is closed and counted; one that has is kept.
func TestIdentifyTimeout(t *testing.T) {
	s := &Server{IdentifyTimeout: 50 * time.Millisecond,
		Identified: func(p *Peer) bool { return p.Identity() != nil },
		Handler: func(ctx context.Context, typ Type, p []byte) ([]byte, error) {
			if typ == TypeHello {
				PeerOf(ctx).SetIdentity("app")
			}
			return nil, nil
		}}
	addr := serve(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The identified connection is made first: its deadline passes first.
	known, err := Dialer{Credentials: &Credentials{App: "app", Secret: "s"}}.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer known.Close()
	silent, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	select {
	case <-silent.Done():
	case <-ctx.Done():
		t.Fatal("a connection that never identified itself is still open")
	}
	if n := s.Stats().Unidentified; n != 1 {
		t.Fatalf("%d connections closed as unidentified, want 1", n)
	}
	if _, err := known.Call(ctx, TypeStatus, nil); err != nil {
		t.Fatalf("the identified connection, after its deadline passed: %v", err)
	}
}

package transport

import (
	"context"
	"net"
	"testing"
	"time"
)

// An address whose connection failed is passed over while another may
// serve, tried when every one failed (a group of one node restarting),
// tried at once when a node names it as the leader, and no longer passed
// over once dialled again.
func TestLeaderClientShunsFailedAddresses(t *testing.T) {
	c, err := NewLeaderClient([]string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"})
	if err != nil {
		t.Fatal(err)
	}
	c.setLeader("127.0.0.1:1")
	c.forget("127.0.0.1:1")
	for range 6 {
		if addr := c.target(); addr == "127.0.0.1:1" {
			t.Fatal("the failed leader was tried again at once")
		}
	}
	c.forget("127.0.0.1:2")
	for range 3 {
		if addr := c.target(); addr != "127.0.0.1:3" {
			t.Fatalf("tried %s, not the one address that has not failed", addr)
		}
	}
	c.forget("127.0.0.1:3")
	seen := map[string]bool{}
	for range 3 {
		seen[c.target()] = true
	}
	if len(seen) != 3 {
		t.Fatalf("with every address failed, tried only %v", seen)
	}
	c.redirected("127.0.0.1:2")
	if addr := c.target(); addr != "127.0.0.1:2" {
		t.Fatalf("named the leader by a redirect, 127.0.0.1:2 was not tried next (%s was)", addr)
	}

	// An address dialled again with success (a connection that closed,
	// redialled at once) is no longer passed over.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	up := ln.Addr().String()
	c2, err := NewLeaderClient([]string{up, "127.0.0.1:2"})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.setLeader(up)
	c2.forget(up)
	if addr := c2.target(); addr == up {
		t.Fatal("the failed leader was tried again at once")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c2.Conn(ctx, up); err != nil {
		t.Fatal(err)
	}
	if addr := c2.target(); addr != up {
		t.Fatalf("the leader was reached again, yet %s was tried instead", addr)
	}
}

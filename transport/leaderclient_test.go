package transport

import "testing"

// An address whose connection failed is passed over while another may
// serve, tried when every one failed (a group of one node restarting),
// and tried at once when a node names it as the leader.
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
}

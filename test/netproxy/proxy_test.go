package netproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer serves lines back to whoever sends them, telling heard (if
// not nil) of each, until the test ends; it returns its address.
func echoServer(t *testing.T, heard chan<- string) string {
	srv, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if heard != nil {
						heard <- line
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return srv.Addr().String()
}

// TestProxyCutsAndSlows: a proxy forwards both ways; refusing a source
// cuts its open connections and refuses new ones until lifted; latency
// delays what it forwards.
func TestProxyCutsAndSlows(t *testing.T) {
	p, err := New("127.0.0.1:0", echoServer(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	roundTrip := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		_, err := bufio.NewReader(c).ReadString('\n')
		return err
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	open := dial()
	defer open.Close()
	if err := roundTrip(open); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Refuse(func(src string) bool { return src == "127.0.0.1" })
	if err := roundTrip(open); err == nil {
		t.Fatal("an open connection from a refused source still works")
	}
	refused := dial()
	defer refused.Close()
	if err := roundTrip(refused); err == nil {
		t.Fatal("a new connection from a refused source works")
	}
	p.Refuse(nil)
	again := dial()
	defer again.Close()
	if err := roundTrip(again); err != nil {
		t.Fatalf("after the refusal is lifted: %v", err)
	}
	p.SetLatency(150 * time.Millisecond)
	start := time.Now()
	if err := roundTrip(again); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 300*time.Millisecond { // 150 ms each way, at least
		t.Fatalf("a round trip with 150 ms added each way took %s", took)
	}
}

// TestProxyDropsOneWay: a one-way cut keeps the connection open and
// discards one direction: requests that never arrive, or that arrive and
// whose answers never come back.
func TestProxyDropsOneWay(t *testing.T) {
	heard := make(chan string, 10)
	p, err := New("127.0.0.1:0", echoServer(t, heard))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	ask := func(line string, wait time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(wait))
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	local := func(src string) bool { return src == "127.0.0.1" }

	p.Drop(local, false) // answers vanish: the request arrives
	if _, err := ask("one", 300*time.Millisecond); err == nil {
		t.Fatal("an answer came back through a dropped direction")
	}
	select {
	case got := <-heard:
		if got != "one\n" {
			t.Fatalf("the server heard %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the server")
	}
	p.Drop(nil, false)
	p.Drop(local, true) // requests vanish
	if _, err := ask("two", 300*time.Millisecond); err == nil {
		t.Fatal("an answer came back to a request that was dropped")
	}
	select {
	case got := <-heard:
		t.Fatalf("the server heard %q through a dropped direction", got)
	default:
	}
	p.Drop(nil, true)
	if got, err := ask("three", 5*time.Second); err != nil || got != "three\n" {
		t.Fatalf("once both directions flow again: %q, %v", got, err)
	}
}

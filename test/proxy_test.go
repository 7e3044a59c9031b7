package test

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// TestProxyCutsAndSlows: a proxy forwards both ways; refusing a source
// cuts its open connections and refuses new ones until lifted; latency
// delays what it forwards.
func TestProxyCutsAndSlows(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
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
					c.Write([]byte(line))
				}
			}()
		}
	}()
	p, err := NewProxy("127.0.0.1:0", echo.Addr().String())
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

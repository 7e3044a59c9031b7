package netns

import (
	"context"
	"io"
	"testing"
	"time"
)

// BenchmarkSwitchPipe is the switch's own cost per packet, between
// in-memory ports (no TUN device, no kernel): a packet read, routed,
// queued and written.
func BenchmarkSwitchPipe(b *testing.B) {
	s := newSwitch(b)
	a, c := newPipe(), newPipe()
	s.Attach(hostA, a)
	s.Attach(hostB, c)
	pkt := ipv4(hostA, hostB, 0)
	done := make(chan struct{})
	go func() {
		for range b.N {
			<-c.out
		}
		close(done)
	}()
	b.ResetTimer()
	for range b.N {
		a.in <- pkt
	}
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

// BenchmarkSwitchTUN is the packet rate the switch carries between two
// hosts' TUN devices under a TCP stream, the kernel's flow control
// pacing it to what the switch forwards (needs root): 1 MiB an op from
// one host to the other; pkts/s counts both directions (data and ACKs).
func BenchmarkSwitchTUN(b *testing.B) {
	if err := Available(); err != nil {
		b.Fatal(err)
	}
	n := New(b, 1)
	src, dst := n.Host(), n.Host()
	l, err := dst.Listen("tcp", dst.AddrPort(7000))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	done := make(chan int64)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- 0
			return
		}
		defer c.Close()
		got, _ := io.Copy(io.Discard, c)
		done <- got
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := src.Dial(ctx, "tcp", dst.AddrPort(7000))
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	before := n.Switch().Stats().Forwarded
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	if got := <-done; got != int64(b.N)*int64(len(chunk)) {
		b.Fatalf("%d bytes arrived of %d", got, int64(b.N)*int64(len(chunk)))
	}
	b.ReportMetric(float64(n.Switch().Stats().Forwarded-before)/b.Elapsed().Seconds(), "pkts/s")
}

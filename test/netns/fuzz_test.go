package netns

import (
	"net/netip"
	"testing"
	"time"
)

// FuzzRoute feeds the switch's router arbitrary bytes as a packet from a
// host: it never panics, and each packet is counted once, forwarded only
// if it is IPv4 to a port of the switch.
func FuzzRoute(f *testing.F) {
	f.Add(ipv4(hostA, hostB, 1))
	f.Add(ipv4(hostA, netip.MustParseAddr("10.213.0.9"), 2))
	f.Add([]byte{0x60, 0, 0, 0})
	f.Add([]byte{})
	f.Add(make([]byte, 19))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := newSwitch(t)
		s.ports[hostB] = &port{addr: hostB, dev: newPipe()}
		s.route(hostA, b, time.Unix(0, 0))
		st := s.Stats()
		if st.Forwarded+st.Lost+st.Cut+st.Unrouted != 1 {
			t.Fatalf("one packet counted as %+v", st)
		}
		toB := len(b) >= 20 && b[0]>>4 == 4 && netip.AddrFrom4([4]byte(b[16:20])) == hostB
		if (st.Forwarded == 1) != toB {
			t.Fatalf("packet % x: forwarded %d, addressed to a port %v", b, st.Forwarded, toB)
		}
	})
}

package server

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

func TestClockEstimate(t *testing.T) {
	const c, h = int64(1_800_000_000_000), int64(time.Hour / time.Millisecond)
	cases := []struct {
		name     string
		readings []int64
		voters   int
		want     int64 // -1: ErrTooFewReadings
	}{
		{"a one-node group uses its own clock", []int64{c + h}, 1, c + h},
		{"a one-node group without a reading", nil, 1, -1},
		{"three correct clocks: the middle one", []int64{c + 2, c, c + 1}, 3, c + 1},
		{"one of three ahead (at the tolerance)", []int64{c + h, c, c + 1}, 3, c + 1},
		{"one of three behind (at the tolerance)", []int64{c, c - h, c + 1}, 3, c},
		{"two of three ahead (over the tolerance): early", []int64{c + h, c, c + h + 1}, 3, c + h},
		{"two readings of three, one ahead", []int64{c + h, c}, 3, c},
		{"two readings of three, one behind: late, never early", []int64{c, c - h}, 3, c - h},
		{"one reading of three (under a quorum)", []int64{c}, 3, -1},
		{"two voters tolerate no wrong clock: the later", []int64{c + h, c}, 2, c + h},
		{"two voters, one reading", []int64{c}, 2, -1},
		{"four voters tolerate one: three readings", []int64{c + h, c, c + 1}, 4, c + 1},
		{"four voters, two readings", []int64{c, c}, 4, -1},
		{"two of five ahead (at the tolerance)", []int64{c + h, c, c + h, c + 1, c + 2}, 5, c + 2},
		{"three of five ahead (over the tolerance)", []int64{c + h, c, c + h, c + 1, c + h}, 5, c + h},
		{"three readings of five, two ahead", []int64{c + h, c, c + h}, 5, c},
		{"two readings of five", []int64{c, c}, 5, -1},
		{"more readings than voters", []int64{c, c, c}, 2, -1},
		{"no voters", []int64{c}, 0, -1},
	}
	for _, tc := range cases {
		in := slices.Clone(tc.readings)
		got, err := clockEstimate(tc.readings, tc.voters)
		if !slices.Equal(in, tc.readings) {
			t.Errorf("%s: the readings were reordered", tc.name)
		}
		switch {
		case tc.want == -1 && !errors.Is(err, ErrTooFewReadings):
			t.Errorf("%s: got %d, %v; want ErrTooFewReadings", tc.name, got, err)
		case tc.want != -1 && (err != nil || got != tc.want):
			t.Errorf("%s: got %d, %v; want %+d ms from c", tc.name, got, err, tc.want-c)
		}
	}
}

// TestClockEstimateNeverAheadOfEveryCorrectClock: with any quorum of
// readings and at most f of them wrong, however wrong, the estimate is at
// or below some correct reading.
func TestClockEstimateNeverAheadOfEveryCorrectClock(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		voters := 1 + rng.IntN(7)
		r := voters/2 + 1 + rng.IntN(voters-voters/2)
		wrong := rng.IntN((voters-1)/2 + 1)
		readings := make([]int64, r)
		correctMax := int64(-1 << 62)
		for i := range readings {
			readings[i] = 1e12 + rng.Int64N(1000) // correct clocks agree within a second
			if i < wrong {
				readings[i] += rng.Int64N(2*3600e3) - 3600e3 // up to an hour either way
			} else {
				correctMax = max(correctMax, readings[i])
			}
		}
		rng.Shuffle(len(readings), func(i, j int) { readings[i], readings[j] = readings[j], readings[i] })
		got, err := clockEstimate(readings, voters)
		if err != nil {
			t.Fatalf("%v of %d voters: %v", readings, voters, err)
		}
		if wrong < r && got > correctMax {
			t.Fatalf("%v of %d voters, %d wrong: estimate %d is ahead of every correct clock (%d)", readings, voters, wrong, got, correctMax)
		}
	}
}

func TestTermClockAnchor(t *testing.T) {
	c := termClock{wall: func() time.Time { return time.Now().Add(time.Hour) }}
	if ok, _ := c.anchoredFor(1); ok {
		t.Fatal("anchored before any anchor")
	}
	_, woken := c.anchoredFor(5)
	c.anchor(5, time.Now(), time.Now())
	select {
	case <-woken:
	default:
		t.Fatal("anchoring did not wake the waiters")
	}
	if ok, _ := c.anchoredFor(5); !ok {
		t.Fatal("not anchored for the term anchored")
	}
	if ok, _ := c.anchoredFor(6); ok {
		t.Fatal("anchored for a later term")
	}
	if d := c.now().Sub(time.Now()); d > time.Second || d < -time.Second {
		t.Fatalf("a clock an hour ahead anchored at the real time reads %s from it", d)
	}
}

// TestTimeRequest: any broker node answers with its configured clock; a
// payload is INVALID.
func TestTimeRequest(t *testing.T) {
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	n := startNode(t, "n1", true, func(c *Config) { c.Now = ahead })
	conn, err := transport.Dial(context.Background(), n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, err := conn.Call(context.Background(), transport.TypeTime, nil)
	if err != nil {
		t.Fatal(err)
	}
	var r timeReply
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if d := time.UnixMilli(r.UnixMS).Sub(ahead()); d > time.Second || d < -time.Second {
		t.Fatalf("time %d is %s off the node's clock", r.UnixMS, d)
	}
	var e *transport.Error
	if _, err := conn.Call(context.Background(), transport.TypeTime, []byte{1}); !errors.As(err, &e) || e.Code != transport.Invalid {
		t.Fatalf("a time request with a payload: %v, want INVALID", err)
	}
	// A one-node group has only its own clock to go by.
	waitLeader(t, n)
	waitFor(t, 10*time.Second, "the clock to be anchored", func() bool { ok, _ := n.clock.anchoredFor(n.raft.CurrentTerm()); return ok })
	if d := n.clock.now().Sub(ahead()); d > time.Second || d < -time.Second {
		t.Fatalf("a one-node group's clock reads %s from its own", d)
	}
}

// TestLeaderWithoutAQuorumOfClocksServesNothingTimed: n2, whose clock is
// an hour ahead, is made the leader while the other nodes' client ports are
// closed, so it cannot read their clocks. It answers sends UNAVAILABLE
// ("leader starting") and fires nothing.
func TestLeaderWithoutAQuorumOfClocksServesNothingTimed(t *testing.T) {
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	nodes := startGroup(t, func(id string, c *Config) {
		if id == "n2" {
			c.Now = ahead
		}
	})
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	c := clientOf(t, n1.ClientAddr())
	if got := sendRaw(t, c, &message.Message{ID: "soon", Subject: "timers", DeliverAt: time.Now().Add(time.Minute).UnixMilli()}); got != transport.SendScheduled {
		t.Fatalf("delayed send: status %d, want scheduled", got)
	}
	n1.client.Close()
	n3.client.Close()
	if err := n1.raft.LeadershipTransferToServer(raft.ServerID("n2"), raft.ServerAddress(n2.cfg.RaftAddr)).Error(); err != nil {
		t.Fatalf("transfer leadership to n2: %v", err)
	}
	waitFor(t, 10*time.Second, "n2 to lead", n2.isLeader)
	conn, err := transport.Dial(context.Background(), n2.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &transport.SendRequest{Messages: []*message.Message{{ID: "now", Subject: "orders"}}}
	_, err = conn.Call(context.Background(), transport.TypeSend, req.Encode())
	var e *transport.Error
	if !errors.As(err, &e) || e.Code != transport.Unavailable || !strings.Contains(e.Message, "leader starting") {
		t.Fatalf("a send to a leader without its group's clocks: %v, want UNAVAILABLE (leader starting)", err)
	}
	if got := len(subjectMessages(t, n2, "timers")); got != 0 {
		t.Fatalf("the leader fired %d delayed messages by its own clock", got)
	}
	// It does not hold the group up: past anchorGiveUp it hands leadership
	// to a voter that may reach a quorum of clocks (n1 reads its own and
	// n2's).
	waitFor(t, anchorGiveUp+10*time.Second, "leadership handed away from n2", func() bool {
		return !n2.isLeader() && leaderOf(nodes) != nil
	})
}

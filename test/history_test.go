package test

import (
	"errors"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
)

// TestCheckerFindsEveryKindOfFault feeds the checker a history with one of
// each fault it looks for, and one without any.
func TestCheckerFindsEveryKindOfFault(t *testing.T) {
	p, err := qmq.NewProducer("127.0.0.1:1") // never sends: only makes messages
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := NewHistory()
	now := time.Now()
	msg := func(delay time.Duration) *qmq.Message {
		m := p.GenerateMessage("s")
		if delay > 0 {
			m.SetDeliverAt(now.Add(delay))
		}
		h.Sending(m)
		return m
	}
	good, dup, lost, unknown, recovered, delayed := msg(0), msg(0), msg(0), msg(0), msg(0), msg(time.Second)
	for _, m := range []*qmq.Message{good, dup, lost, delayed} {
		h.Sent(m, nil)
	}
	h.Sent(unknown, errors.New("timeout"))
	h.Sent(recovered, errors.New("timeout"))
	for _, g := range []string{"a", "b"} {
		h.Delivered(g, good, now)
		h.Delivered(g, dup, now)
		h.Delivered(g, recovered, now)
		h.Delivered(g, delayed, now.Add(time.Second))
	}
	h.Delivered("a", dup, now)
	h.Delivered("a", lost, now) // b never gets it
	if r := h.Check([]string{"a", "b"}); len(r.Lost) != 1 || r.Recovered != 1 || r.Duplicated["a"] != 1 ||
		r.Acked != 4 || r.Unknown != 2 || r.Delayed != 1 || len(r.Early) != 0 || len(r.Unexpected) != 0 || r.OK() {
		t.Fatalf("report: %+v", r)
	}
	if n := h.Undelivered([]string{"a", "b"}); n != 1 {
		t.Fatalf("undelivered %d, want 1", n)
	}
	h.Delivered("b", lost, now)
	stranger := p.GenerateMessage("s")
	h.Delivered("b", stranger, now)
	early := msg(time.Hour)
	h.Sent(early, nil)
	h.Delivered("a", early, now)
	h.Delivered("b", early, now.Add(time.Hour))
	r := h.Check([]string{"a", "b"})
	if len(r.Lost) != 0 || len(r.Unexpected) != 1 || len(r.Early) != 1 || r.OK() {
		t.Fatalf("report: %+v", r)
	}
}

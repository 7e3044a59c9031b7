package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// TestLocateAllAndReadWires reads, in runs, what a pull hands out: two
// subjects' messages interleaved in the message log (so a subject's
// neighbours in the consume log are not always neighbours in the message
// log), over segment boundaries, and after retention removed the oldest.
// Every message read equals what reading it alone gives; a removed one is
// marked Gone or comes back nil.
func TestLocateAllAndReadWires(t *testing.T) {
	f := retentionFSM(t, logs.Retention{MaxBytes: 3 << 20})
	idx := uint64(0)
	for i := range 40 {
		idx++
		msgs := []*message.Message{bigMsg(fmt.Sprint("a", i), "a")}
		if i%3 == 0 {
			msgs = append(msgs, unitMsg(fmt.Sprint("b", i), "b", 10))
		}
		if i%2 == 0 {
			msgs = append(msgs, unitMsg(fmt.Sprint("a-small", i), "a", 10))
		}
		appendAt(t, f, idx, 1000, msgs...)
	}
	cl := f.store.consumeLog("a")
	if cl.StartSeq() != 0 || f.store.messages.Log().Start() == 0 {
		t.Fatalf("the test wants entries whose messages retention removed (consume log from %d, message log from %d)",
			cl.StartSeq(), f.store.messages.Log().Start())
	}
	var seqs []int64
	for seq := range cl.EndSeq() {
		seqs = append(seqs, seq)
	}
	seqs = append(seqs, 3, 2, 50, 51, 7) // out of order, as redeliveries come first
	ats, err := f.LocateAll("a", seqs)
	if err != nil || len(ats) != len(seqs) {
		t.Fatalf("LocateAll: %d, %v", len(ats), err)
	}
	wires, err := f.ReadWires(ats)
	if err != nil || len(wires) != len(seqs) {
		t.Fatalf("ReadWires: %d, %v", len(wires), err)
	}
	gone := 0
	for i, seq := range seqs {
		m, err := f.Message("a", seq)
		if errors.Is(err, logs.ErrRetained) {
			if wires[i] != nil {
				t.Fatalf("sequence %d: retention removed it, but ReadWires read %d bytes", seq, len(wires[i]))
			}
			gone++
			continue
		}
		if err != nil {
			t.Fatalf("Message(a, %d): %v", seq, err)
		}
		if !bytes.Equal(wires[i], m.AppendEncoded(nil)) {
			t.Fatalf("sequence %d: ReadWires gave %.40x…, want the encoding of %s", seq, wires[i], m.ID)
		}
	}
	if gone == 0 || gone == len(seqs) {
		t.Fatalf("%d of %d gone: the test wants some of each", gone, len(seqs))
	}
	if _, err := f.LocateAll("a", []int64{cl.EndSeq()}); !errors.Is(err, logs.ErrBeyondEnd) {
		t.Fatalf("LocateAll past the end: %v, want ErrBeyondEnd", err)
	}
	if _, err := f.LocateAll("nothing", []int64{0}); !errors.Is(err, ErrNoSubject) {
		t.Fatalf("LocateAll of an unknown subject: %v, want ErrNoSubject", err)
	}
}

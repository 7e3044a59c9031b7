package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/test/testmsg"
)

// A message within limits.MaxMessage is stored, immediate or delayed, and
// a delayed one fires into the message log and reads back whole; one over
// it is refused by apply alike on every replica, changing nothing. Before
// the limit was defined once, a delayed message whose encoding fitted a
// frame (limits.MaxFrame - 8 bytes, say) made a schedule record over the
// schedule log's payload limit, and apply panicked on every replica.
func TestMessagesAtTheSizeLimit(t *testing.T) {
	const now = 1_800_000_000_000
	sizes := []struct {
		size int
		ok   bool
	}{
		{limits.MaxMessage - 1, true},
		{limits.MaxMessage, true},
		{limits.MaxMessage + 1, false},
		{limits.MaxFrame - 8, false},
	}
	for _, tc := range sizes {
		for _, delayed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d bytes delayed=%v", tc.size, delayed), func(t *testing.T) {
				f := unitFSM(t)
				appendAt(t, f, 1, now, unitMsg("warm", "big", 10))
				at := int64(0)
				if delayed {
					at = now + 5000
				}
				m := testmsg.OfSize("big-1", "big", at, tc.size)
				before, files := stateBytes(f), dataFiles(t, f.cfg.Dir)
				res := appendAt(t, f, 2, now, m).Messages[0]
				if !tc.ok {
					if res.Status != Rejected || !errors.Is(res.Err, message.ErrTooLarge) || !errors.Is(res.Err, ErrInvalid) {
						t.Fatalf("result %+v, want Rejected with ErrMessageTooLarge", res)
					}
					wantStateUnchanged(t, f, before)
					if after := dataFiles(t, f.cfg.Dir); !sameData(files, after) {
						t.Fatal("a refused message changed the logs")
					}
					return
				}
				want := Appended
				if delayed {
					want = Scheduled
				}
				if res.Status != want {
					t.Fatalf("result %+v, want status %d", res, want)
				}
				if delayed {
					if fired := fireAt(t, f, 3, at, res.Ref); fired.Fired != 1 {
						t.Fatalf("fire: %+v", fired)
					}
				}
				got, err := f.Message("big", 1)
				if err != nil {
					t.Fatal(err)
				}
				if got.ID != m.ID || !bytes.Equal(got.Body, m.Body) || len(got.Properties) != len(m.Properties) || got.EncodedSize() > limits.MaxMessage {
					t.Fatalf("read back %s with %d properties and %d encoded bytes", got.ID, len(got.Properties), got.EncodedSize())
				}
			})
		}
	}
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

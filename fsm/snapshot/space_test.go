package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

func emptyFiles(string) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(nil)), nil }

// wantErrNoSpace asserts that err wraps ErrNoSpace and names both counts.
func wantErrNoSpace(tb testing.TB, err error, need, free int64) {
	tb.Helper()
	if !errors.Is(err, ErrNoSpace) {
		tb.Fatalf("error %v, want ErrNoSpace", err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("needs %d bytes free", need)) || !strings.Contains(msg, fmt.Sprintf(", %d are", free)) {
		tb.Fatalf("error %q does not say %d bytes are needed and %d free", msg, need, free)
	}
}

func TestStoreRefusesStreamWithoutSpace(t *testing.T) {
	stream := newTestData(t, 30_000).stream()
	m := checkStream(t, stream)
	headLen := headerSize + len(m.encode()) + 4
	need := 2*int64(len(stream)) + SpaceReserve

	for _, tc := range []struct {
		name string
		free int64
		ok   bool
	}{
		{"just under", need - 1, false},
		{"exactly", need, true},
		{"just over", need + 1, true},
		{"empty disk", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeDisk{free: tc.free}
			store := unitStore(t, WithFreeSpace(fake.probe))
			sink, took, err := receive(t, store, stream)
			if !reflect.DeepEqual(fake.asked, []string{store.dir}) {
				t.Fatalf("the probe was asked about %v, want once about %s", fake.asked, store.dir)
			}
			if tc.ok {
				if err != nil {
					t.Fatalf("Write: %v", err)
				}
				if err := sink.Close(); err != nil {
					t.Fatal(err)
				}
				if got := openStream(t, store, sink.ID()); !bytes.Equal(got, stream) {
					t.Fatalf("stored %d bytes, want %d", len(got), len(stream))
				}
				return
			}
			wantErrNoSpace(t, err, need, tc.free)
			// Refused as soon as the manifest arrived, before any file's bytes.
			if took > headLen {
				t.Fatalf("%d bytes taken before the refusal; the head is %d", took, headLen)
			}
			if got := storedIDs(t, store); len(got) != 0 {
				t.Fatalf("a refused snapshot left %v", got)
			}
			if _, err := sink.Write(stream[took:]); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Write after the refusal: %v, want ErrNoSpace", err)
			}
			if err := sink.Close(); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Close after the refusal: %v, want ErrNoSpace", err)
			}
			if err := sink.Cancel(); err != nil {
				t.Fatalf("Cancel after the refusal: %v", err)
			}
			if got := storedIDs(t, store); len(got) != 0 {
				t.Fatalf("a refused snapshot left %v", got)
			}
			if ids := listedIDs(t, store); len(ids) != 0 {
				t.Fatalf("List after a refusal: %v", ids)
			}
		})
	}

	// A probe that fails does not stop the snapshot.
	fake := &fakeDisk{err: errors.New("statfs: not supported")}
	store := unitStore(t, WithFreeSpace(fake.probe))
	sink, _, err := receive(t, store, stream)
	if err != nil {
		t.Fatalf("Write with a failing probe: %v", err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if len(fake.asked) != 1 {
		t.Fatalf("the probe was asked %d times", len(fake.asked))
	}
}

func TestStoreRefusesMalformedHead(t *testing.T) {
	stream := newTestData(t, 100).stream()
	flip := func(at int) []byte {
		b := bytes.Clone(stream)
		b[at] ^= 0x40
		return b
	}
	// A manifest whose checksum holds but whose path the layout refuses.
	var refused bytes.Buffer
	if err := Write(&refused, &Manifest{Checkpoint: []byte("x"), Files: []File{{Rel: "../x.seg"}}}, emptyFiles); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		stream []byte
	}{
		{"magic", flip(0)},
		{"manifest length", flip(headerSize - 1)},
		{"manifest", flip(headerSize + 2)},
		{"path", refused.Bytes()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeDisk{free: 1 << 62}
			store := unitStore(t, WithFreeSpace(fake.probe))
			sink, _, err := receive(t, store, tc.stream)
			if !errors.Is(err, ErrBad) {
				t.Fatalf("Write: %v, want ErrBad", err)
			}
			if len(fake.asked) != 0 {
				t.Fatalf("the probe was asked about %v for a malformed head", fake.asked)
			}
			sink.Cancel()
			if got := storedIDs(t, store); len(got) != 0 {
				t.Fatalf("a refused snapshot left %v", got)
			}
		})
	}
}

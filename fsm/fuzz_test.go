package fsm

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzDecodeCommand: Decode never panics, refuses with ErrBadCommand, and
// whatever it accepts re-encodes to exactly its input (a command has one
// encoding).
func FuzzDecodeCommand(f *testing.F) {
	cmds := sampleCommands()
	for _, name := range sortedKeys(cmds) {
		f.Add(cmds[name].Encode())
	}
	consume := sampleConsumeCommands()
	for _, name := range sortedKeys(consume) {
		f.Add(consume[name].Encode())
	}
	over := overLimitConsumeCommands()
	for _, name := range sortedKeys(over) {
		f.Add(over[name])
	}
	for _, e := range unitWorkload(20, 3) {
		if e.Type == raft.LogCommand {
			f.Add(e.Data)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{byte(CmdAppend), commandVersion})
	f.Add([]byte{byte(CmdAck), commandVersion, 0, 0, 0, 0, 0, 0, 0, 0, 1, 's', 1, 'g', 1, 'c', 1, 0, 0}) // version 1: no epoch
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, err := Decode(b)
		if err != nil {
			if cmd != nil || !errors.Is(err, ErrBadCommand) {
				t.Fatalf("Decode = %#v, %v; want nil and ErrBadCommand", cmd, err)
			}
			return
		}
		e, ok := cmd.(encoder)
		if !ok {
			t.Fatalf("Decode returned %T", cmd)
		}
		again := e.Encode()
		if again[1] != b[1] {
			// An older version of the command, written now in the current
			// one: the same command, whose new bytes decode to it.
			if back, err := Decode(again); err != nil || !reflect.DeepEqual(back, cmd) {
				t.Fatalf("%T of version %d re-encodes to %x, which decodes to %#v, %v", cmd, b[1], again, back, err)
			}
			return
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("%T re-encodes to\n%x\nnot\n%x", cmd, again, b)
		}
	})
}

// FuzzDecodeCheckpoint: decodeCheckpoint never panics, refuses with
// ErrBadCheckpoint, and whatever it accepts re-encodes to its input. Each
// input is also tried with its checksum recomputed, so that mutations reach
// the decoder behind it.
func FuzzDecodeCheckpoint(f *testing.F) {
	busy := busyFSM(f)
	f.Add(stateCheckpoint(busy))
	work := unitFSM(f)
	applyAll(work, unitWorkload(60, 10))
	f.Add(stateCheckpoint(work))
	empty := unitFSM(f)
	f.Add(stateCheckpoint(empty))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		try := func(b []byte) {
			c, err := decodeCheckpoint(b)
			if err != nil {
				if c != nil || !errors.Is(err, ErrBadCheckpoint) {
					t.Fatalf("decodeCheckpoint = %v, %v; want nil and ErrBadCheckpoint", c, err)
				}
				return
			}
			if again := c.encodeVersion(b[0]); !bytes.Equal(again, b) {
				t.Fatalf("re-encodes to\n%x\nnot\n%x", again, b)
			}
			// A state has one encoding: what encode() writes of it (a
			// checkpoint before version 4 is written in version 4 now).
			if again := c.encode(); b[0] >= 4 && !bytes.Equal(again, b) {
				t.Fatalf("a state encode() writes as\n%x\ndecoded from\n%x", again, b)
			}
		}
		try(b)
		if len(b) >= 4 {
			try(seal(bytes.Clone(b[:len(b)-4])))
		}
	})
}

// stateCheckpoint returns the checkpoint f would write now.
func stateCheckpoint(f *FSM) []byte {
	return f.currentCheckpoint().encode()
}

// FuzzCheckSnapPath: checkSnapPath refuses with ErrBadSnapshot, and every
// path it accepts names a segment inside the directory a restore writes
// to (package snapshot's FuzzReadStream checks that a stream creates only
// the files its path check accepts).
func FuzzCheckSnapPath(f *testing.F) {
	for _, tc := range snapPathCases {
		f.Add(tc.rel)
	}
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, rel string) {
		if err := checkSnapPath(rel); err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("checkSnapPath(%q) = %v, want ErrBadSnapshot", rel, err)
			}
			return
		}
		local := filepath.FromSlash(rel)
		path := filepath.Join(root, local)
		if !filepath.IsLocal(local) || !strings.HasPrefix(path, root+string(filepath.Separator)) || !strings.HasSuffix(rel, ".seg") {
			t.Fatalf("checkSnapPath accepts %q, which would write %s, not a segment inside %s", rel, path, root)
		}
	})
}

// FuzzCheckSnapshot: CheckSnapshot never panics and refuses with
// ErrBadSnapshot (or the checkpoint's ErrBadCheckpoint); what it accepts,
// Restore restores, or refuses as a bad snapshot (a checkpoint that the
// segments do not bear out is found only by opening them).
func FuzzCheckSnapshot(f *testing.F) {
	busy := snapshotStream(f, busyFSM(f))
	f.Add(busy)
	f.Add(snapshotStream(f, unitFSM(f)))
	f.Add(busy[:len(busy)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		err := CheckSnapshot(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) && !errors.Is(err, ErrBadCheckpoint) {
				t.Fatalf("CheckSnapshot = %v, want ErrBadSnapshot or ErrBadCheckpoint", err)
			}
			return
		}
		if err := unitFSM(t).Restore(io.NopCloser(bytes.NewReader(b))); err != nil && !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("Restore of a stream CheckSnapshot accepts: %v", err)
		}
	})
}

package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
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

// FuzzReadStream: readStream never panics, refuses with ErrBadSnapshot,
// and never asks to create a file outside the store's directory. Each input
// is also tried with its manifest checksum recomputed, so that mutations
// reach the manifest decoder and the path checks.
func FuzzReadStream(f *testing.F) {
	f.Add(snapshotStream(f, busyFSM(f)))
	f.Add(streamMagic[:])
	f.Add([]byte{})
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		try := func(b []byte) {
			var created []string
			var sizes []int64
			m, err := readStream(bytes.NewReader(b), func(rel string) (io.WriteCloser, error) {
				if err := checkSnapPath(rel); err != nil {
					t.Fatalf("create(%q), a path checkSnapPath refuses: %v", rel, err)
				}
				local := filepath.FromSlash(rel)
				path := filepath.Join(root, local)
				if !filepath.IsLocal(local) || !strings.HasPrefix(path, root+string(filepath.Separator)) {
					t.Fatalf("create(%q) would write %s, outside %s", rel, path, root)
				}
				created = append(created, rel)
				sizes = append(sizes, 0)
				return &countWriter{n: &sizes[len(sizes)-1]}, nil
			})
			if err != nil {
				if m != nil || !errors.Is(err, ErrBadSnapshot) {
					t.Fatalf("readStream = %v, %v; want nil and ErrBadSnapshot", m, err)
				}
				return
			}
			if len(created) != len(m.files) {
				t.Fatalf("%d files created, the manifest lists %d", len(created), len(m.files))
			}
			for i, f := range m.files {
				if created[i] != f.rel || sizes[i] != f.size {
					t.Fatalf("file %d: created %s with %d bytes, manifest says %s with %d", i, created[i], sizes[i], f.rel, f.size)
				}
			}
		}
		try(b)
		if resealed, ok := resealManifest(b); ok {
			try(resealed)
		}
	})
}

type countWriter struct{ n *int64 }

func (w *countWriter) Write(p []byte) (int, error) { *w.n += int64(len(p)); return len(p), nil }
func (w *countWriter) Close() error                { return nil }

// resealManifest returns b with its manifest checksum recomputed, if b
// holds a whole manifest.
func resealManifest(b []byte) ([]byte, bool) {
	if len(b) < 12 {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint32(b[8:12]))
	if n > len(b)-16 {
		return nil, false
	}
	out := bytes.Clone(b)
	binary.LittleEndian.PutUint32(out[12+n:], crc32.Checksum(out[12:12+n], castagnoli))
	return out, true
}

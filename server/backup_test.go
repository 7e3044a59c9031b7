package server

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/backup"
	"github.com/qmqgo/qmq/transport"
)

// backupOf takes a backup of group through the node at addr into a new
// file, in chunks of max bytes, and returns its path.
func backupOf(t *testing.T, addr, group string, max int) (string, *backup.Fetched) {
	t.Helper()
	path := filepath.Join(t.TempDir(), group+".qmqbackup")
	src := backupSource(t, addr, group)
	got, err := backup.Fetch(ctxFor(t, 30*time.Second), src, group, path, backup.FetchOptions{Max: max})
	if err != nil {
		t.Fatalf("backup of %s: %v", group, err)
	}
	return path, got
}

func backupSource(t *testing.T, addr, group string) *admin.BackupSource {
	t.Helper()
	src, err := newAdmin(t, addr).BackupSource(ctxFor(t, 10*time.Second), group)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	return src
}

// restoreInto restores the backup at path into a new data directory for
// node id at a new Raft address, and returns both.
func restoreInto(t *testing.T, path, id string) (dir, raftAddr string) {
	t.Helper()
	dir, raftAddr = filepath.Join(t.TempDir(), "data"), freeAddr(t)
	if _, err := Restore(RestoreConfig{From: path, DataDir: dir, ID: id, RaftAddr: raftAddr, Logger: testLogger(t, "restore")}); err != nil {
		t.Fatal(err)
	}
	return dir, raftAddr
}

// TestBackupRestoreBroker: a backup of a broker group, in many chunks,
// restored into a new data directory, starts a one-voter group of the
// same name that holds every message acknowledged before it, once, and
// takes sends.
func TestBackupRestoreBroker(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	acked := sendAcked(t, []string{n.ClientAddr()}, "orders", 300)
	path, got := backupOf(t, n.ClientAddr(), "g1", 64<<10)
	if got.Header.Kind != transport.BackupBroker || got.Header.Group != "g1" || got.Chunks < 2 || got.Header.Index < n.fsm.Applied()-3 {
		t.Fatalf("backup %+v in %d chunks; want the broker group g1 at about index %d, in several chunks", got.Header, got.Chunks, n.fsm.Applied())
	}
	dir, raftAddr := restoreInto(t, path, "r1")
	r := startNode(t, "r1", false, func(c *Config) { c.DataDir, c.RaftAddr = dir, raftAddr })
	waitLeader(t, r)
	if r.cfg.BrokerGroup != "g1" || r.fsm.Applied() < got.Header.Index {
		t.Fatalf("restored node at applied index %d, the backup's is %d", r.fsm.Applied(), got.Header.Index)
	}
	if st := r.Status(); len(st.Members) != 1 || st.Members[0].ID != "r1" {
		t.Fatalf("restored group's members %+v, want r1 alone", st.Members)
	}
	wantHeld(t, r, "orders", acked)
	more := sendAcked(t, []string{r.ClientAddr()}, "orders", 10)
	for id := range more {
		acked[id] = true
	}
	wantHeld(t, r, "orders", acked)
}

// TestBackupRestoreMeta: a backup of the metaserver group restored into a
// new data directory starts a metaserver that holds the applications.
func TestBackupRestoreMeta(t *testing.T) {
	m := startMeta(t, "m1", true)
	waitFor(t, 10*time.Second, "leadership", func() bool { return m.Status().State == "Leader" })
	a := newAdmin(t, m.ClientAddr())
	if _, err := a.CreateApp(ctxFor(t, 10*time.Second), admin.AppSpec{Code: "billing", Send: []string{"orders"}}); err != nil {
		t.Fatal(err)
	}
	path, got := backupOf(t, m.ClientAddr(), admin.MetaGroup, 0)
	if got.Header.Kind != transport.BackupMeta || got.Header.Group != admin.MetaGroup {
		t.Fatalf("backup %+v; want the metaserver group", got.Header)
	}
	dir, raftAddr := restoreInto(t, path, "r1")
	r := startMeta(t, "r1", false, func(c *MetaConfig) { c.DataDir, c.RaftAddr = dir, raftAddr })
	waitFor(t, 10*time.Second, "leadership", func() bool { return r.Status().State == "Leader" })
	apps, err := newAdmin(t, r.ClientAddr()).Apps(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(apps) != 1 || apps[0].Code != "billing" {
		t.Fatalf("restored metaserver's applications %+v, want billing", apps)
	}
}

// TestBackupLimits: a node serves at most Max backups at once, the next
// is RESOURCE_EXHAUSTED; an abandoned one is released after Idle, and run
// again it continues its partial file from the stored snapshot; once that
// snapshot is gone it starts over, saying so.
func TestBackupLimits(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) {
		c.Backups = BackupLimits{Max: 1, Idle: 500 * time.Millisecond}
		c.SnapshotInterval, c.SnapshotThreshold = time.Hour, 1<<40
	})
	waitLeader(t, n)
	sendAcked(t, []string{n.ClientAddr()}, "orders", 200)
	src := backupSource(t, n.ClientAddr(), "g1")
	path := filepath.Join(t.TempDir(), "g1.qmqbackup")
	ctx := ctxFor(t, 30*time.Second)
	first, err := backup.Fetch(ctx, src, "g1", path, backup.FetchOptions{Max: 4096, StopAfter: 2})
	if !errors.Is(err, backup.ErrStopped) {
		t.Fatalf("a backup stopped after 2 chunks: %v", err)
	}
	if n.Status().Backups != 1 {
		t.Fatalf("%d backups held, want the stopped one", n.Status().Backups)
	}
	_, err = src.Backup(ctx, transport.BackupRequest{Group: "g1"})
	var e *transport.Error
	if !errors.As(err, &e) || e.Code != transport.ResourceExhausted || !strings.Contains(err.Error(), "1 backups at once") {
		t.Fatalf("a second backup while one is held: %v; want RESOURCE_EXHAUSTED naming the bound", err)
	}
	waitFor(t, 10*time.Second, "the abandoned backup released", func() bool { return n.Status().Backups == 0 })

	var said []string
	say := func(f string, args ...any) { said = append(said, f) }
	resumed, err := backup.Fetch(ctx, src, "g1", path, backup.FetchOptions{Max: 4096, Say: say})
	if err != nil {
		t.Fatal(err)
	}
	if resumed.ResumedAt != 2*4096 || resumed.Restarted != "" || resumed.Header.SnapshotID == "" {
		t.Fatalf("the second run %+v; want it continued at byte %d (%q)", resumed, 2*4096, said)
	}
	if _, err := os.Stat(path + backup.PartialSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the partial file is left: %v", err)
	}
	verify(t, path)

	// Stopped again, then the snapshot reaped by two newer ones: a new run
	// starts over.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Fetch(ctx, src, "g1", path, backup.FetchOptions{Max: 4096, StopAfter: 1}); !errors.Is(err, backup.ErrStopped) {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the abandoned backup released", func() bool { return n.Status().Backups == 0 })
	for range 2 {
		sendAcked(t, []string{n.ClientAddr()}, "orders", 5)
		if err := n.raft.Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	again, err := backup.Fetch(ctx, src, "g1", path, backup.FetchOptions{Max: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if again.Restarted == "" || again.ResumedAt != 0 || again.Header.SnapshotID == first.Header.SnapshotID {
		t.Fatalf("a run after its snapshot was reaped: %+v; want it started over from a new snapshot", again)
	}
	verify(t, path)
}

// verify reads the backup at path whole.
func verify(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := backup.Read(f, discard{}); err != nil {
		t.Fatalf("%s does not verify: %v", path, err)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestRestoreRefuses: a corrupt backup file (a byte flipped in a chunk,
// cut short, a wrong trailer), one whose chunks are whole around a corrupt
// snapshot, and a data directory that holds anything are refused, naming
// where, and the directory is left as it was.
func TestRestoreRefuses(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	sendAcked(t, []string{n.ClientAddr()}, "orders", 100)
	path, _ := backupOf(t, n.ClientAddr(), "g1", 8192)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		change func([]byte) []byte
		want   string
	}{
		{"a byte flipped in the middle", func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }, "checksum mismatch"},
		{"cut short", func(b []byte) []byte { return b[:len(b)*2/3] }, "cut short"},
		{"a wrong trailer", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, "(trailer): checksum of the file mismatch"},
		{"no trailer", func(b []byte) []byte { return b[:len(b)-16] }, "cut short (no trailer)"},
	} {
		bad := filepath.Join(t.TempDir(), "bad")
		if err := os.WriteFile(bad, c.change(append([]byte(nil), good...)), 0o600); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "data")
		_, err := Restore(RestoreConfig{From: bad, DataDir: dir, ID: "r1", RaftAddr: "127.0.0.1:1"})
		var ce *backup.CorruptError
		if !errors.Is(err, ErrRestore) || !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "at byte") {
			t.Errorf("%s: %v; want refused, saying %q and where", c.name, err, c.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the data directory was made: %v", c.name, err)
		}
		if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), "*")); len(left) > 0 {
			t.Errorf("%s: left %v", c.name, left)
		}
	}
	// Whole chunks around a snapshot stream with a byte flipped: the state
	// machine's own check refuses it, naming the file in the stream.
	var stream bytes.Buffer
	h, err := backup.Read(bytes.NewReader(good), &stream)
	if err != nil {
		t.Fatal(err)
	}
	b := stream.Bytes()
	b[len(b)/2] ^= 0x40
	inner := filepath.Join(t.TempDir(), "inner")
	w, err := backup.Create(inner, h)
	if err != nil {
		t.Fatal(err)
	}
	for len(b) > 0 {
		n := min(len(b), backup.MaxChunk)
		if err := w.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	_, err = Restore(RestoreConfig{From: inner, DataDir: dir, ID: "r1", RaftAddr: "127.0.0.1:1"})
	if !errors.Is(err, ErrRestore) || !strings.Contains(err.Error(), "the snapshot in it is corrupt at byte") || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("a backup of a corrupt snapshot: %v; want refused, naming where", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a backup of a corrupt snapshot: the data directory was made: %v", err)
	}
	// An empty directory (a mount point, say) is filled in place, and left
	// empty by a refused restore.
	empty := t.TempDir()
	if _, err := Restore(RestoreConfig{From: inner, DataDir: empty, ID: "r1", RaftAddr: "127.0.0.1:1"}); !errors.Is(err, ErrRestore) {
		t.Errorf("a restore of a corrupt snapshot into an empty directory: %v", err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("a refused restore left %v in an empty directory", entries)
	}
	if _, err := Restore(RestoreConfig{From: path, DataDir: empty, ID: "r1", RaftAddr: "127.0.0.1:1"}); err != nil {
		t.Errorf("a restore into an empty directory: %v", err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 2 {
		t.Errorf("a restore into an empty directory left %v; want the snapshots and the Raft store", entries)
	}
	// A directory that holds anything is refused, and kept.
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(RestoreConfig{From: path, DataDir: dir, ID: "r1", RaftAddr: "127.0.0.1:1"}); !errors.Is(err, ErrRestore) || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a restore into a directory that holds a file: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory now holds %d entries", len(entries))
	}
	if _, err := Restore(RestoreConfig{From: path, DataDir: filepath.Join(t.TempDir(), "d"), ID: "r1", RaftAddr: "127.0.0.1:1", Group: "g2"}); !errors.Is(err, ErrRestore) || !strings.Contains(err.Error(), "not g2") {
		t.Errorf("a restore of g1 as g2: %v", err)
	}
}

// TestBackupChunkAgain: a chunk asked for again (its answer lost) comes
// again, the same bytes, also after the snapshot has left the store's
// list (two newer ones taken) while the backup holds it; a request naming
// a snapshot the node does not hold is answered from a new one at 0.
func TestBackupChunkAgain(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	sendAcked(t, []string{n.ClientAddr()}, "orders", 100)
	src := backupSource(t, n.ClientAddr(), "g1")
	ctx := ctxFor(t, 30*time.Second)
	ask := func(id string, off int64) *transport.BackupChunk {
		t.Helper()
		c, err := src.Backup(ctx, transport.BackupRequest{Group: "g1", SnapshotID: id, Offset: off, Max: 4096})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := ask("", 0)
	second := ask(first.SnapshotID, 4096)
	for range 2 {
		sendAcked(t, []string{n.ClientAddr()}, "orders", 5)
		if err := n.raft.Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	again := ask(first.SnapshotID, 0)
	if again.SnapshotID != first.SnapshotID || again.Offset != 0 || !bytes.Equal(again.Data, first.Data) {
		t.Fatalf("chunk 0 asked again: snapshot %s at %d, %d bytes; want %s's first %d bytes again", again.SnapshotID, again.Offset, len(again.Data), first.SnapshotID, len(first.Data))
	}
	if next := ask(first.SnapshotID, 4096); !bytes.Equal(next.Data, second.Data) {
		t.Fatal("chunk 1 asked again differs")
	}
	other := ask("1-1-1", 8192)
	if other.SnapshotID == first.SnapshotID || other.Offset != 0 {
		t.Fatalf("a request for a snapshot never held: %s at %d; want a new snapshot from 0", other.SnapshotID, other.Offset)
	}
}

// TestBackupRate: with a rate bound, a backup reads no faster than it.
func TestBackupRate(t *testing.T) {
	const rate = 256 << 10
	n := startNode(t, "n1", true, func(c *Config) { c.Backups.Rate = rate })
	waitLeader(t, n)
	sendAcked(t, []string{n.ClientAddr()}, "orders", 1000)
	start := time.Now()
	_, got := backupOf(t, n.ClientAddr(), "g1", 64<<10)
	took := time.Since(start)
	// The first chunk goes at once, each next one 64 KiB later.
	if least := time.Duration(got.Chunks-1) * time.Second * (64 << 10) / rate; got.Chunks < 3 || took < least {
		t.Fatalf("%d chunks of 64 KiB in %s, under a bound of 256 KiB/s: want at least %s", got.Chunks, took, least)
	}
	t.Logf("%d bytes in %d chunks in %s", got.Header.Size, got.Chunks, took)
}

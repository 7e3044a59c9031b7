package fsm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/qmqgo/qmq/logs"
)

// A crash after retention wrote its checkpoint but before the deletions
// reached the disk brings removed segments back; Open must finish the
// removal, or this replica's pulls would differ from the others'.
func TestOpenFinishesInterruptedRemoval(t *testing.T) {
	r := logs.Retention{MaxBytes: 3 << 20}
	entries := retentionWorkload(120)
	ref := retentionFSM(t, r)
	first := -1 // the entry whose apply first removed segments
	for i := range entries {
		applyAll(ref, entries[i:i+1])
		if first < 0 && ref.store.messages.Log().Start() > 0 {
			first = i
		}
	}
	if first < 0 {
		t.Fatal("the workload never triggered retention")
	}

	cfg := unitConfig(t.TempDir())
	cfg.Retention = r
	f := unitOpen(t, cfg)
	applyAll(f, entries[:first])
	data := filepath.Join(cfg.Dir, dataDir)
	backup := t.TempDir()
	copyTree(t, data, backup)
	applyAll(f, entries[first:first+1])
	start := f.store.messages.Log().Start()
	if start == 0 {
		t.Fatal("retention did not run on the same entry")
	}
	f.Close()
	// The deletions are lost: every removed segment is back.
	restored := 0
	filepath.WalkDir(backup, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".seg" {
			return err
		}
		rel, _ := filepath.Rel(backup, path)
		if _, err := os.Stat(filepath.Join(data, rel)); os.IsNotExist(err) {
			b, _ := os.ReadFile(path)
			os.MkdirAll(filepath.Dir(filepath.Join(data, rel)), 0o755)
			if err := os.WriteFile(filepath.Join(data, rel), b, 0o644); err != nil {
				t.Fatal(err)
			}
			restored++
		}
		return nil
	})
	if restored == 0 {
		t.Fatal("no segment was removed, so nothing could come back")
	}

	g := unitOpen(t, cfg)
	if got := g.store.messages.Log().Start(); got != start {
		t.Fatalf("reopened with the message log starting at %d, want %d", got, start)
	}
	applyAll(g, entries[first+1:])
	wantSameFiles(t, ref.cfg.Dir, cfg.Dir)
	wantSameReads(t, ref, g)
}

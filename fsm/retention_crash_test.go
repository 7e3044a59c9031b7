package fsm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/message"
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

// retentionStepWorkload applies to ref, and returns with ref's answers,
// entries that leave groups of s behind retention (a cursor, entries due
// again, dead letters) before appending enough to two subjects for
// retention to remove segments several times, with pulls of every group
// along the way. Right after the first removal it purges the dead letters
// retention did not drop, which a replica that missed the removal's
// adjustments would purge instead of counting them lost, for good.
func retentionStepWorkload(tb testing.TB, ref *FSM) ([]*raft.Log, []string) {
	now := rigStart
	var out []*raft.Log
	var want []string
	add := func(cmd encoder) {
		e := unitEntry(uint64(len(out)+1), cmd)
		out = append(out, e)
		want = append(want, describe(ref.Apply(e)))
	}
	sent := 0
	big := func(subject string) {
		add(&Append{Now: now, Messages: []*message.Message{bigMsg(fmt.Sprint("m", sent), subject)}})
		sent++
	}
	for range 4 {
		big("s")
	}
	add(&Pull{Now: now, Subject: "s", ConsumerGroup: "cur", Consumer: "c", Max: 1, Start: StartEarliest})
	add(&Ack{Now: now, Subject: "s", ConsumerGroup: "cur", Consumer: "c", Ranges: []message.AckRange{{First: 0, Last: 0}}})
	add(&Pull{Now: now, Subject: "s", ConsumerGroup: "red", Consumer: "c", Max: 3, Start: StartEarliest})
	add(&Reclaim{Now: now, Subject: "s", ConsumerGroup: "red", Consumer: "c"})
	add(&SetConsumerGroup{Now: now, Subject: "s", ConsumerGroup: "dead", Set: SetMaxDeliveries, Settings: ConsumerGroupSettings{MaxDeliveries: 1}, Start: StartEarliest})
	add(&Pull{Now: now, Subject: "s", ConsumerGroup: "dead", Consumer: "c", Max: 2, Start: StartEarliest})
	add(&Nack{Now: now, Subject: "s", ConsumerGroup: "dead", Consumer: "c", Ranges: []message.AckRange{{First: 0, Last: 1}}})
	add(&Pull{Now: now, Subject: "t", ConsumerGroup: "win", Consumer: "c", Max: 2, Start: StartEarliest})
	if info, _ := ref.ConsumerGroup("s", "dead"); info.DeadLetters != 2 {
		tb.Fatalf("the workload's dead letters: %+v", info)
	}
	purged := false
	for i := range 70 {
		now += 1000
		big([]string{"s", "t"}[i%2])
		if !purged && ref.store.messages.Log().Start() > 0 {
			add(&DeadLetters{Now: now, Subject: "s", ConsumerGroup: "dead", Op: DeadPurge, All: true})
			purged = true
		}
		if i%10 == 9 {
			for _, g := range []string{"cur", "red", "dead"} {
				add(&Pull{Now: now, Subject: "s", ConsumerGroup: g, Consumer: "c2", Max: 2, Start: StartEarliest})
			}
		}
	}
	return out, want
}

// crashed is what a test's retention step hook panics with to stop the
// state machine where it stands, as a crash would.
type crashed struct{}

// A node that stops anywhere between retention's checkpoint and the next
// checkpoint (after the checkpoint, after the message log's removal, after
// each consume log's, after the groups' adjustments, after the pull log's)
// reopens, finishes the clean-up and, replaying the rest, ends
// byte-identical in state and logs to a replica that never stopped.
func TestRetentionCleanUpSurvivesAStopBetweenSteps(t *testing.T) {
	r := logs.Retention{MaxBytes: 3 << 20}
	ref := retentionFSM(t, r)
	var steps []string
	ref.retentionStep = func(step string) { steps = append(steps, step) }
	entries, want := retentionStepWorkload(t, ref)
	ref.retentionStep = nil
	if len(steps) < 5 || ref.store.messages.Log().Start() == 0 {
		t.Fatalf("the workload's retention went through %v", steps)
	}
	first := steps
	if next := slices.Index(steps[1:], steps[0]); next >= 0 {
		first = steps[:next+1]
	}
	if lost := ref.group(t, "dead").Lost; lost < 2 {
		t.Fatalf("retention counted %d of the dead letters lost: the workload tests nothing", lost)
	}
	for at := range first {
		t.Run(fmt.Sprintf("%d-%s", at, first[at]), func(t *testing.T) {
			cfg := unitConfig(t.TempDir())
			cfg.Retention = r
			f := unitOpen(t, cfg)
			seen := 0
			f.retentionStep = func(step string) {
				if seen == at {
					panic(crashed{})
				}
				seen++
			}
			stoppedAt := -1
			for i, e := range entries {
				func() {
					defer func() {
						if p := recover(); p != nil {
							if _, ok := p.(crashed); !ok {
								panic(p)
							}
							stoppedAt = i
						}
					}()
					f.Apply(e)
				}()
				if stoppedAt >= 0 {
					break
				}
			}
			if stoppedAt < 0 {
				t.Fatal("never stopped")
			}
			f.Close()
			g := unitOpen(t, cfg)
			got := applyAll(g, entries[stoppedAt+1:])
			if !slices.Equal(got, want[stoppedAt+1:]) {
				t.Errorf("replayed answers differ from the uninterrupted replica's:\n%v\n%v", got, want[stoppedAt+1:])
			}
			if a, b := stateBytes(ref), stateBytes(g); !bytes.Equal(a, b) {
				t.Errorf("state differs from the uninterrupted replica's: cur %+v / %+v, red %+v / %+v, dead %+v / %+v",
					ref.group(t, "cur"), g.group(t, "cur"), ref.group(t, "red"), g.group(t, "red"), ref.group(t, "dead"), g.group(t, "dead"))
			}
			wantSameFiles(t, ref.cfg.Dir, cfg.Dir)
			wantSameReads(t, ref, g)
		})
	}
}

// group returns the information of group g of s, which must exist.
func (f *FSM) group(tb testing.TB, g string) ConsumerGroupInfo {
	tb.Helper()
	info, ok := f.ConsumerGroup("s", g)
	if !ok {
		tb.Fatalf("group %s unknown", g)
	}
	return info
}

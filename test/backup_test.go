package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
)

// backupIndex is the snapshot index qmqctl backup printed.
func backupIndex(t *testing.T, out string) uint64 {
	t.Helper()
	m := regexp.MustCompile(`\(index (\d+), term \d+\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("qmqctl backup printed no snapshot index:\n%s", out)
	}
	i, _ := strconv.ParseUint(m[1], 10, 64)
	return i
}

// subjectIndexes lists every message of subject in the broker group
// behind a: each id's Raft index.
func subjectIndexes(t *testing.T, a *admin.Client, subject string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	from := int64(0)
	for from >= 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		pages, err := a.Messages(ctx, admin.MessageQuery{Subject: subject, FromSeq: &from, Limit: 1000})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if len(pages) != 1 {
			t.Fatalf("%d pages of %s, want one broker group's", len(pages), subject)
		}
		for _, m := range pages[0].Messages {
			out[m.ID] = m.RaftIndex
		}
		if pages[0].Next <= from && pages[0].Next >= 0 {
			t.Fatalf("listing %s: next %d after %d", subject, pages[0].Next, from)
		}
		from = pages[0].Next
	}
	return out
}

// consume pulls n messages of subject for group and acks them, or
// nacks them with the retry given (nil: ack); every message handed out is
// finished before it returns.
func consume(t *testing.T, servers, subject, group string, n int, retry *qmq.RetryError) {
	t.Helper()
	p, err := qmq.NewPuller(servers, subject, group)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for got := 0; got < n; {
		msgs, err := p.Pull(ctx, n-got, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if retry == nil {
			err = p.Ack(ctx, msgs...)
		} else {
			err = p.Nack(ctx, retry, msgs...)
		}
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
	}
}

// TestBackupBrokerGroupUnderLoad: qmqctl backup of a three-node broker
// group while a producer sends, interrupted once and continued, restored
// with qmqd restore into a new one-node group, holds exactly the messages
// applied up to its snapshot index (none after), the consumer groups'
// positions, their pending retries and dead letters, the pending delayed
// messages, the group's configuration and its dedup window.
func TestBackupBrokerGroupUnderLoad(t *testing.T) {
	const subject = "orders"
	meta := NewMetaGroup(t, "--election-timeout", "500ms")
	meta.Form("", "m1")
	servers := meta.ClientAddrs()
	c := NewCluster(t, "g1", "--meta", servers, "--election-timeout", "500ms")
	c.Form(servers, "n1", "n2", "n3")
	ctl := func(args ...string) string {
		t.Helper()
		out, err := c.Ctl(append([]string{"--server", servers}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ctl("consumer-group", "set", "--subject", subject, "--group", "ops", "--max-deliveries", "5", "--retry-first", "1h", "--retry-max", "2h")
	ctl("consumer-group", "set", "--subject", subject, "--group", "audit", "--max-deliveries", "1")
	ctl("send", "--subject", "later", "--delay", "1h", "--count", "20", "later")
	ctl("config", "set", "--broker-group", "g1", "--max-pull", "777")

	p, err := qmq.NewProducer(servers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	send := func(ctx context.Context) (string, error) {
		m := p.GenerateMessage(subject)
		m.SetBody([]byte(strings.Repeat("b", 2000)))
		return m.ID(), p.SendMessage(ctx, m)
	}
	for range 300 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := send(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	consume(t, servers, subject, "ops", 100, nil)
	consume(t, servers, subject, "ops", 10, qmq.RetryAfter(time.Hour))
	consume(t, servers, subject, "audit", 20, nil)
	consume(t, servers, subject, "audit", 3, qmq.RetryAfter(time.Second))
	a, err := admin.New(servers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	view := func(a *admin.Client, group string) admin.ConsumerGroupInfo {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v, err := a.ConsumerGroup(ctx, subject, group)
		if err != nil {
			t.Fatal(err)
		}
		return v.Total
	}
	c.WaitFor(10*time.Second, "the retries and dead letters recorded", func() error {
		if ops, audit := view(a, "ops"), view(a, "audit"); ops.Retrying != 10 || audit.DeadLetters != 3 {
			return fmt.Errorf("ops retrying %d, audit dead letters %d", ops.Retrying, audit.DeadLetters)
		}
		return nil
	})

	// A steady load through the backup.
	var mu sync.Mutex
	acked := 0
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var load sync.WaitGroup
	load.Go(func() {
		for loadCtx.Err() == nil {
			ctx, cancel := context.WithTimeout(loadCtx, 10*time.Second)
			_, err := send(ctx)
			cancel()
			if err == nil {
				mu.Lock()
				acked++
				mu.Unlock()
			} else if loadCtx.Err() == nil {
				t.Errorf("send under load: %v", err)
				return
			}
		}
	})
	t.Cleanup(func() { stopLoad(); load.Wait() })
	loaded := func() int { mu.Lock(); defer mu.Unlock(); return acked }
	c.WaitFor(10*time.Second, "the load under way", func() error {
		if n := loaded(); n < 20 {
			return fmt.Errorf("%d sent", n)
		}
		return nil
	})

	// Interrupted after two chunks, then continued.
	file := filepath.Join(t.TempDir(), "g1.qmqbackup")
	start := time.Now()
	if out, err := c.Ctl("--server", servers, "backup", "--broker-group", "g1", "--out", file, "--chunk-size", "65536", "--stop-after-chunks", "2"); err == nil ||
		!strings.Contains(out, "stopped before the end") {
		t.Fatalf("a backup stopped after two chunks: %v\n%s", err, out)
	}
	if _, err := os.Stat(file + ".partial"); err != nil {
		t.Fatalf("no partial file after the interruption: %v", err)
	}
	out := ctl("backup", "--broker-group", "g1", "--out", file, "--chunk-size", "65536")
	took := time.Since(start)
	if !strings.Contains(out, "continuing "+file+".partial at byte 131072") || !strings.Contains(out, "continued from byte 131072") {
		t.Fatalf("the second run did not continue the partial file:\n%s", out)
	}
	index := backupIndex(t, out)
	st, _ := os.Stat(file)
	t.Logf("backup of g1 at index %d: %d bytes in %s:\n%s", index, st.Size(), took.Round(time.Millisecond), out)
	sentDuring := loaded()
	c.WaitFor(10*time.Second, "more sent after the backup", func() error {
		if n := loaded(); n < sentDuring+20 {
			return fmt.Errorf("%d sent, %d by the backup's end", n, sentDuring)
		}
		return nil
	})
	stopLoad()
	load.Wait()
	orig := subjectIndexes(t, a, subject)
	opsView, auditView := view(a, "ops"), view(a, "audit")

	r := NewCluster(t, "g1", "--election-timeout", "500ms")
	restoreStart := time.Now()
	rn, out := r.Restore("r1", file)
	t.Logf("qmqd restore: %s", strings.TrimSpace(out))
	r.WaitFor(20*time.Second, "r1 leads the restored group", func() error {
		st, err := rn.Status()
		if err != nil {
			return err
		}
		if st.State != "Leader" || len(st.Members) != 1 || st.AppliedIndex < index {
			return fmt.Errorf("r1: %s, %d members, applied %d (the backup's index %d)", st.State, len(st.Members), st.AppliedIndex, index)
		}
		return nil
	})
	t.Logf("restored and leading in %s", time.Since(restoreStart).Round(time.Millisecond))
	ra, err := admin.New(rn.ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ra.Close() })

	got := subjectIndexes(t, ra, subject)
	before, after := 0, 0
	for id, i := range orig {
		_, in := got[id]
		switch {
		case i <= index && !in:
			t.Errorf("message %s (raft index %d, the backup's %d) is missing from the restored group", id, i, index)
		case i > index && in:
			t.Errorf("message %s (raft index %d) is in a backup of index %d", id, i, index)
		}
		if i <= index {
			before++
		} else {
			after++
		}
	}
	for id := range got {
		if _, ok := orig[id]; !ok {
			t.Errorf("the restored group holds %s, which the original does not", id)
		}
	}
	if before <= 300 || after == 0 {
		t.Errorf("%d messages before the snapshot, %d after: the load did not straddle the backup", before, after)
	}
	t.Logf("%d messages at or before index %d restored, %d after it left out", before, index, after)
	for _, g := range []struct {
		name string
		was  admin.ConsumerGroupInfo
	}{{"ops", opsView}, {"audit", auditView}} {
		now := view(ra, g.name)
		if now.Cursor != g.was.Cursor || now.Retrying != g.was.Retrying || now.DeadLetters != g.was.DeadLetters || now.Unacked != 0 ||
			now.Settings.MaxDeliveries != g.was.Settings.MaxDeliveries {
			t.Errorf("consumer group %s restored as cursor %d, retrying %d, dead letters %d, unacked %d, settings %+v; was %d, %d, %d, 0, %+v",
				g.name, now.Cursor, now.Retrying, now.DeadLetters, now.Unacked, now.Settings, g.was.Cursor, g.was.Retrying, g.was.DeadLetters, g.was.Settings)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	was, err := a.DeadLetters(ctx, subject, "audit", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	now, err := ra.DeadLetters(ctx, subject, "audit", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(was) != 1 || len(now) != 1 || len(now[0].Letters) != 3 || fmt.Sprint(letterSeqs(now[0])) != fmt.Sprint(letterSeqs(was[0])) {
		t.Errorf("dead letters restored %+v, were %+v", now, was)
	}
	delays, err := ra.Delays(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(delays) != 1 || delays[0].Subjects["later"] != 20 {
		t.Errorf("restored delays %+v, want the 20 of later pending", delays)
	}
	if out, err := r.Ctl("--server", rn.ClientAddr, "config", "show", "--broker-group", "g1"); err != nil || !strings.Contains(out, "777") {
		t.Errorf("the restored group's configuration has not --max-pull 777: %v\n%s", err, out)
	}
	// The dedup window: an id stored before the backup is a duplicate.
	rp, err := qmq.NewProducer(rn.ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	var old string
	for id, i := range got {
		if i <= index {
			old = id
			break
		}
	}
	m := rp.GenerateMessage(subject)
	if err := m.SetID(old); err != nil {
		t.Fatal(err)
	}
	if err := rp.SendMessage(ctx, m); err != nil || !m.Duplicate() {
		t.Errorf("a resend of %s to the restored group: %v, duplicate %v; want a duplicate", old, err, m.Duplicate())
	}
}

func letterSeqs(p admin.DeadLetterPage) []int64 {
	var out []int64
	for _, l := range p.Letters {
		out = append(out, l.Seq)
	}
	return out
}

// TestBackupMeta: qmqctl backup --meta, restored with qmqd restore into a
// new one-node metaserver, holds the applications, the routes and the
// broker groups; a corrupted copy of it is refused by
// qmqd restore, naming the byte and the chunk, with the data directory
// left absent.
func TestBackupMeta(t *testing.T) {
	meta := NewMetaGroup(t, "--election-timeout", "500ms")
	meta.Form("", "m1", "m2", "m3")
	servers := meta.ClientAddrs()
	c := NewCluster(t, "g1", "--meta", servers, "--election-timeout", "500ms")
	c.Form(servers, "n1")
	ctl := func(args ...string) string {
		t.Helper()
		out, err := meta.Ctl(append([]string{"--server", servers}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ctl("app", "create", "--send", "orders", "billing")
	ctl("subject", "assign", "--broker-groups", "g1", "orders")
	file := filepath.Join(t.TempDir(), "meta.qmqbackup")
	out := ctl("backup", "--meta", "--out", file)
	if !strings.Contains(out, "backup of meta group meta") {
		t.Fatalf("qmqctl backup --meta:\n%s", out)
	}
	t.Logf("%s", strings.TrimSpace(out))

	// Corrupted: a byte in the middle flipped.
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.qmqbackup")
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x10
	if err := os.WriteFile(bad, flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	out, err = meta.Qmqd("restore", "--from", bad, "--data", dir, "--id", "r1", "--raft", FreeAddr(t))
	if err == nil || !regexp.MustCompile(`corrupt backup file at byte \d+ \((chunk \d+|header|trailer)\)`).MatchString(out) {
		t.Fatalf("qmqd restore of a corrupted file: %v\n%s", err, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused restore made %s: %v", dir, err)
	}

	r := NewMetaGroup(t, "--election-timeout", "500ms")
	rn, _ := r.Restore("r1", file)
	r.WaitFor(20*time.Second, "r1 leads the restored metaserver", func() error {
		st, err := rn.Status()
		if err != nil {
			return err
		}
		if st.State != "Leader" || len(st.Members) != 1 {
			return fmt.Errorf("r1: %s, %d members", st.State, len(st.Members))
		}
		return nil
	})
	ra, err := admin.New(rn.ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ra.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	apps, err := ra.Apps(ctx)
	if err != nil || len(apps) != 1 || apps[0].Code != "billing" || len(apps[0].Send) != 1 || apps[0].Send[0] != "orders" {
		t.Errorf("restored applications %+v, %v; want billing, sending to orders", apps, err)
	}
	routes, err := ra.Subjects(ctx)
	if err != nil || len(routes) != 1 || routes[0].Subject != "orders" || len(routes[0].BrokerGroups) != 1 || routes[0].BrokerGroups[0].Name != "g1" {
		t.Errorf("restored routes %+v, %v; want orders on g1", routes, err)
	}
	cl, err := ra.Cluster(ctx)
	if err != nil || len(cl.BrokerGroups) != 1 || cl.BrokerGroups[0].Name != "g1" {
		t.Fatalf("restored broker groups %+v, %v; want g1", cl, err)
	}
}

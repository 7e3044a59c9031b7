package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/test/poll"
)

// consume --count N exits 1 when fewer than N came (none came for
// --timeout), saying how many did; --count 0 exits 0 when --timeout
// passes; a signal ends it with 128 + its number (130 for Ctrl-C),
// acking what it printed.
func TestConsumeExitStatus(t *testing.T) {
	srv := startCluster(t)
	s := []string{"--server", srv}
	mustRun(t, append(s, "send", "--subject", "jobs", "one")...)
	out, stderr, status := runCLIStatus(append(s, "consume", "--subject", "jobs", "--group", "w", "--start", "earliest", "--count", "3", "--timeout", "1s")...)
	if status != 1 || strings.Count(out, "\n") != 1 || stderr != "qmqctl consume: got 1 of 3 messages: none came for --timeout 1s\n" {
		t.Fatalf("consume --count 3 of 1: exit status %d, stderr %q, stdout %q", status, stderr, out)
	}
	if out, stderr, status := runCLIStatus(append(s, "consume", "--subject", "jobs", "--group", "w", "--timeout", "200ms")...); status != 0 || out != "" || stderr != "" {
		t.Fatalf("consume without --count of nothing: exit status %d, stderr %q, stdout %q", status, stderr, out)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		group := "sig-" + strconv.Itoa(int(sig))
		cmd := qmqctlCommand(t, ctx, append(s, "consume", "--subject", "jobs", "--group", group, "--timeout", "60s")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		a, err := admin.New(srv)
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 20*time.Second, "the consumer to register", func() bool {
			v, err := a.ConsumerGroup(ctx, "jobs", group)
			return err == nil && v.Total.Consumers > 0
		})
		a.Close()
		start := time.Now()
		cmd.Process.Signal(sig)
		err = cmd.Wait()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 128+int(sig) || time.Since(start) > 10*time.Second {
			t.Errorf("consume sent %v: %v after %s, want exit status %d at once; stderr %q", sig, err, time.Since(start), 128+int(sig), stderr.String())
		}
	}
}

// consume receives a message as soon as a broker group of the subject
// has it, whichever: with --count 1 (fewer messages than the subject's two
// broker groups) it pulled from one broker group at a time, and missed
// what the other received until that pull ended, or for good.
func TestConsumeGetsADelayedMessageWhenDue(t *testing.T) {
	srv := startCluster(t)
	p, err := qmq.NewProducer(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, err := admin.New(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 4 {
		subject := "due-" + string(rune('a'+i))
		type result struct {
			out, stderr string
			status      int
			at          time.Time
		}
		done := make(chan result, 1)
		go func() {
			out, stderr, status := runCLIStatus("--server", srv, "consume", "--subject", subject, "--group", "g", "--count", "1", "--timeout", "5s")
			done <- result{out, stderr, status, time.Now()}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		poll.Until(t, 20*time.Second, "the consumer to register", func() bool {
			v, err := a.ConsumerGroup(ctx, subject, "g")
			return err == nil && v.Total.Consumers > 0
		})
		m := p.GenerateMessage(subject)
		due := time.Now().Add(500 * time.Millisecond)
		m.SetDeliverAt(due)
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		cancel()
		r := <-done
		if r.status != 0 || !strings.Contains(r.out, m.ID()) {
			t.Fatalf("consume --count 1 of a message due in 500ms : exit status %d, stderr %q, stdout %q",
				r.status, r.stderr, r.out)
		}
		if late := r.at.Sub(due); late > time.Second {
			t.Errorf("consume --count 1 returned the message %s after it fell due", late)
		}
	}
}

// consume --count 1 of a subject whose two broker groups both hold
// messages takes one and leaves the rest to the next run at once (none
// held until its session expires).
func TestConsumeCountOneTakesOne(t *testing.T) {
	srv := startCluster(t)
	s := []string{"--server", srv}
	const n = 6
	p, err := qmq.NewProducer(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range n { // one producer, one at a time: spread over the broker groups
		if err := p.SendMessage(ctx, p.GenerateMessage("backlog")); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	seen := map[string]bool{}
	groups := map[string]int{}
	for i := range n {
		out, stderr, status := runCLIStatus(append(s, "consume", "--subject", "backlog", "--group", "g", "--start", "earliest", "--count", "1", "--timeout", "3s")...)
		var m struct {
			ID          string `json:"id"`
			BrokerGroup string `json:"broker_group"`
		}
		if status != 0 || json.Unmarshal([]byte(out), &m) != nil || seen[m.ID] {
			t.Fatalf("run %d of consume --count 1: exit status %d, stderr %q, stdout %q (seen %v)", i+1, status, stderr, out, seen)
		}
		seen[m.ID] = true
		groups[m.BrokerGroup]++
	}
	if len(groups) != 2 {
		t.Fatalf("the messages came from %v: the test wants both broker groups to hold some", groups)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("%d runs of consume --count 1 took %s", n, took)
	}
}

package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/test/poll"
)

// sendPullAck sends a message with the body "paid" to subject, has a
// consumer of group pull it and ack it, and returns its id.
func sendPullAck(t *testing.T, f *fixture, subject, group string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := qmq.NewPuller(f.meta, subject, group, qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := qmq.NewProducer(f.meta)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := p.GenerateMessage(subject)
	m.SetBody([]byte("paid"))
	if err := p.SendMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	var got []*qmq.Message
	for len(got) == 0 {
		if got, err = c.Pull(ctx, 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0].ID() != m.ID() {
		t.Fatalf("pulled %v, want %s", got, m.ID())
	}
	if err := c.Ack(ctx, got...); err != nil {
		t.Fatal(err)
	}
	return m.ID()
}

// TestBrowser drives the console in headless Chromium against a test
// cluster: every page loads without a console error and shows what the
// cluster holds, and a resend from the page takes effect. Screenshots go
// to $QMQ_ARTIFACTS (a temporary directory by default).
func TestBrowser(t *testing.T) {
	artifacts := os.Getenv("QMQ_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	} else if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	f := start(t, false)
	deadLetters(t, f, "orders", "billing", 2)

	ctx, problems := browser(t)
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var buf []byte
			if err := chromedp.FullScreenshot(&buf, 90).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(artifacts, name+".jpg"), buf, 0o644)
		})
	}
	page := func(hash, heading, name string, want ...string) {
		t.Helper()
		var text string
		err := chromedp.Run(ctx,
			chromedp.Evaluate(fmt.Sprintf("location.hash = %q", hash), nil),
			chromedp.WaitVisible(fmt.Sprintf(`//h2[contains(., %q)] | //*[@id="error"]`, heading), chromedp.BySearch),
			chromedp.Text("#main", &text, chromedp.ByQuery),
			shot(name))
		if err != nil {
			t.Fatalf("page %s: %v", hash, err)
		}
		if !strings.Contains(text, heading) {
			t.Fatalf("page %s shows an error: %s", hash, text)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("page %s does not show %q:\n%s", hash, w, text)
			}
		}
	}
	if err := chromedp.Run(ctx, chromedp.Navigate(f.srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	page("#cluster", "Cluster health", "cluster", "Broker group g1", "g1-n1", "g1-n2", "g1-n3", "Follower")
	page("#subjects", "Subjects", "subjects", "orders", "billing")
	page("#groups?subject=orders", "Consumer groups of orders", "groups", "billing")
	page("#group?subject=orders&group=billing", "billing of orders", "group", "Dead letters (2)")
	page("#delays", "Delayed messages", "delays", "Broker group g1")
	page("#messages", "Messages", "messages")
	page("#dead?subject=orders&group=billing", "Dead letters of billing", "dead", "Broker group g1: 2")

	err := chromedp.Run(ctx,
		chromedp.Evaluate(`window.confirm = () => true`, nil),
		chromedp.Click(".resend-one", chromedp.ByQuery),
		chromedp.WaitVisible(`#action-result.ok`, chromedp.ByQuery),
		shot("resent"))
	if err != nil {
		t.Fatalf("resend from the page: %v", err)
	}
	poll.Until(t, 10*time.Second, "one dead letter left", func() bool {
		v, err := f.a.ConsumerGroup(context.Background(), "orders", "billing")
		return err == nil && v.Total.DeadLetters == 1
	})

	// A message sent, pulled and acked: its page shows where it is
	// stored and its timeline, ending with the ack.
	id := sendPullAck(t, f, "invoices", "accounts")
	var text string
	err = chromedp.Run(ctx,
		chromedp.Evaluate(fmt.Sprintf("location.hash = %q", "#messages?id="+id), nil),
		chromedp.WaitVisible(`//*[@id="message-result"]/*`, chromedp.BySearch),
		chromedp.Text("#message-result", &text, chromedp.ByQuery),
		shot("message"))
	if err != nil {
		t.Fatalf("the message's page: %v", err)
	}
	for _, want := range []string{"Message " + id + " of invoices", "Timeline", "Raft index", "paid"} {
		if !strings.Contains(text, want) {
			t.Errorf("the message's page does not show %q:\n%s", want, text)
		}
	}
	// The timeline table as the page draws it, from an answer of the
	// API's shape: a row an event, with what each says besides its kind.
	var drawn []string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`(() => {
		const s = storedMessage({id: "x", subject: "s", body: "cGFpZA==", timeline_more: true, timeline: [
			{kind: "sent", at: "2026-01-31T09:00:00Z", raft_index: 3, app: "billing", client_address: "127.0.0.1:9", due: "2026-01-31T10:00:00Z"},
			{kind: "nacked", at: "2026-01-31T10:00:01Z", raft_index: 5, consumer_group: "g", consumer: "c", due: "2026-01-31T10:05:00Z"},
			{kind: "dead-lettered", at: "2026-01-31T10:05:01Z", raft_index: 8, consumer_group: "g", consumer: "c", delivery: 2}]});
		return Array.from(s.querySelectorAll("h4 + table tr")).slice(1).map(r => Array.from(r.cells).map(c => c.textContent).join("|"))
			.concat([s.textContent.includes("More events after these") ? "more" : "", s.textContent.includes("paid") ? "paid" : ""]);
	})()`, &drawn)); err != nil {
		t.Fatal(err)
	}
	if want := []string{"2026-01-31T09:00:00Z|sent||||3|app billing, from 127.0.0.1:9, deliver at 2026-01-31T10:00:00Z",
		"2026-01-31T10:00:01Z|nacked|g|c||5|retry at 2026-01-31T10:05:00Z", "2026-01-31T10:05:01Z|dead-lettered|g|c|2|8|", "more", "paid"}; strings.Join(drawn, "\n") != strings.Join(want, "\n") {
		t.Errorf("a timeline drawn as\n%s\nwant\n%s", strings.Join(drawn, "\n"), strings.Join(want, "\n"))
	}
	var events []string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`Array.from(document.querySelectorAll("#message-result h4 + table tr")).slice(1).map(r => r.cells[1].textContent + "/" + r.cells[2].textContent)`, &events)); err != nil {
		t.Fatal(err)
	}
	if strings.Join(events, ",") != "sent/,handed-out/accounts,acked/accounts" {
		t.Errorf("the message's timeline shows %v, want sent, then handed out to accounts and acked by accounts:\n%s", events, text)
	}
	for _, p := range problems() {
		t.Errorf("browser: %s", p)
	}
	t.Logf("screenshots in %s", artifacts)
}

// browser starts headless Chromium for the test, with a 90 s deadline; problems
// returns the exceptions and console errors and warnings it saw.
func browser(t *testing.T) (ctx context.Context, problems func() []string) {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("no chromium on PATH: `make test` installs it (make chromium), or apt-get install chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	var mu sync.Mutex
	var seen []string
	listen := func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			seen = append(seen, "exception: "+ev.ExceptionDetails.Error())
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				seen = append(seen, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		}
	}
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelT)
	chromedp.ListenTarget(ctx, listen)
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

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
	"unicode"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/console"
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
	// Three messages billing owes, one of them pulled and not acked: a
	// lag (3) the pages must show, unlike its backlog (2).
	sendN(t, f, "orders", 3)
	holder, err := qmq.NewPuller(f.meta, "orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	for held := 0; held == 0; {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		msgs, err := holder.Pull(ctx, 1, time.Second)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		held = len(msgs)
	}
	poll.Until(t, 10*time.Second, "billing owes the three, one in flight", func() bool {
		v, err := f.a.ConsumerGroup(context.Background(), "orders", "billing")
		return err == nil && v.Total.Lag == 3 && v.Total.Backlog == 2
	})
	// A snapshot of the metaserver node: the cluster page shows its index.
	if err := f.metaNode.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	metaSt, err := f.a.Status(context.Background(), f.meta)
	if err != nil || metaSt.LastSnapshotIndex == 0 {
		t.Fatalf("the metaserver's status after a snapshot: %+v, %v", metaSt, err)
	}

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
			// The last page goes first: its heading may hold this one's.
			chromedp.Evaluate(fmt.Sprintf(`document.getElementById("main").replaceChildren(); location.hash = %q`, hash), nil),
			chromedp.WaitVisible(fmt.Sprintf(`//h2[starts-with(., %q)] | //*[@id="error"]`, heading), chromedp.BySearch),
			chromedp.Text("#main", &text, chromedp.ByQuery),
			shot(name))
		if err != nil {
			t.Fatalf("page %s: %v", hash, err)
		}
		if !strings.Contains(text, heading) {
			t.Fatalf("page %s shows an error: %s", hash, text)
		}
		// A value the page lacked shows as such, never as JavaScript's.
		for _, word := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) }) {
			if word == "null" || word == "undefined" || word == "NaN" {
				t.Errorf("page %s shows %q:\n%s", hash, word, text)
			}
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
	page("#cluster", "Cluster health", "cluster", "Broker group g1", "g1-n1", "g1-n2", "g1-n3", "Follower", "Last snapshot", "Disk free", "sends a second")
	// The metaserver node's row: its term, indexes and snapshot as its
	// status says, and disk free and TLS.
	metaRow := cells(t, ctx, "#meta-nodes", "m1")
	if len(metaRow) != 11 || metaRow[2] != "Leader" || metaRow[3] != fmt.Sprint(metaSt.Term) || metaRow[6] != "0" ||
		!strings.HasPrefix(metaRow[7], fmt.Sprintf("%d (term %d) ", metaSt.LastSnapshotIndex, metaSt.LastSnapshotTerm)) ||
		!strings.HasSuffix(metaRow[8], "B") || metaRow[9] != "no" {
		t.Errorf("the metaserver node's row %q; its status %+v", metaRow, metaSt)
	}
	for _, id := range []string{"g1-n1", "g1-n2", "g1-n3"} {
		if row := cells(t, ctx, `.broker-nodes[data-group="g1"]`, id); len(row) != 12 || row[8] != "none" || !strings.HasSuffix(row[9], "B") || row[10] != "no" {
			t.Errorf("broker node %s's row %q, want no snapshot, disk free and no TLS", id, row)
		}
	}
	page("#subjects", "Subjects", "subjects", "orders", "billing")
	page("#groups?subject=orders", "Consumer groups of orders", "groups", "billing")
	// The lag a page shows is the Admin API's, read before and after it.
	sameLag := func(table, row string, col int) {
		t.Helper()
		before, err := f.a.ConsumerGroup(context.Background(), "orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		shown := cells(t, ctx, table, row)
		after, err := f.a.ConsumerGroup(context.Background(), "orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		if after.Total.Lag != before.Total.Lag {
			t.Fatalf("billing's lag moved while the page loaded: %d, then %d", before.Total.Lag, after.Total.Lag)
		}
		if len(shown) <= col || shown[col] != fmt.Sprint(after.Total.Lag) {
			t.Errorf("%s row %s shows %q; the Admin API says lag %d", table, row, shown, after.Total.Lag)
		}
	}
	sameLag("#groups-table", "billing", 1)
	// The subject's rate and retention horizon: the five messages sent
	// in the last minute, the first of them retained.
	if row := cells(t, ctx, "#subject-table", "g1"); len(row) != 7 || row[1] != "yes" || row[3] != "5" || row[4] != fmt.Sprintf("%.2f", 5.0/60) ||
		!strings.HasPrefix(row[5], "20") || row[6] != "" {
		t.Errorf("orders in g1: %q, want 5 appended in the last minute and a retention horizon", row)
	}
	// The cluster page's look started the sampler; its first point holds
	// billing's lag (billing owes most).
	poll.Until(t, 30*time.Second, "the console's first sample", func() bool {
		var h struct{ Points []console.Point }
		f.get(t, "/api/v1/history", &h)
		return len(h.Points) > 0
	})
	page("#group?subject=orders&group=billing", "billing of orders", "group", "Dead letters (2)", "Backlog by age and retention")
	sameLag("#group-table", "total", 1)
	sameLag("#group-table", "g1", 1)
	// Its lag charted from the console's samples (billing owes most, so
	// the cluster page's first sample has it), one point a sample.
	var chart struct {
		Text            string
		Samples, Points int
	}
	if err := chromedp.Run(ctx, chromedp.Evaluate(`(() => { const p = document.getElementById("group-lag");
		return { text: p.textContent, samples: Number(p.dataset.samples),
			points: p.querySelector("polyline").getAttribute("points").split(" ").filter(x => x).length }; })()`, &chart)); err != nil {
		t.Fatal(err)
	}
	if chart.Samples < 1 || chart.Points != chart.Samples || !strings.Contains(chart.Text, " 3 now (") {
		t.Errorf("billing's lag chart: %+v, want a point a sample and its lag 3", chart)
	}
	// Its consumers as the Admin API lists them, the one holding a
	// message in flight said to.
	v, err := f.a.ConsumerGroup(context.Background(), "orders", "billing")
	if err != nil || len(v.BrokerGroups) != 1 {
		t.Fatalf("billing: %+v, %v", v, err)
	}
	var members []string
	for _, m := range v.BrokerGroups[0].Members {
		members = append(members, fmt.Sprintf("g1|%s|%d", m.Name, m.InFlight))
	}
	var shownMembers []string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`Array.from(document.querySelectorAll("#consumers-table tr")).slice(1).map(r => Array.from(r.cells).slice(0, 3).map(c => c.textContent).join("|"))`, &shownMembers)); err != nil {
		t.Fatal(err)
	}
	if strings.Join(shownMembers, ",") != strings.Join(members, ",") || !slices.ContainsFunc(members, func(m string) bool { return strings.HasSuffix(m, "|1") }) {
		t.Errorf("billing's consumers shown %q; the Admin API's %q, one holding a message in flight", shownMembers, members)
	}
	if row := cells(t, ctx, "#ages-table", "g1"); len(row) != 5 || row[1] == "none" || row[3] == "nothing retained" || row[4] != "" {
		t.Errorf("billing's ages %q, want an oldest message not handed out and a retention horizon", row)
	}
	// 101 subjects hold delayed messages, later-000 two: the page lists
	// the 100 with the most, and says what is left out.
	sendDelayed(t, f, 101)
	poll.Until(t, 30*time.Second, "101 subjects of delayed messages", func() bool {
		var d struct {
			BrokerGroups []struct{ Subjects map[string]int64 } `json:"broker_groups"`
		}
		f.get(t, "/api/v1/delays", &d)
		return len(d.BrokerGroups) == 1 && len(d.BrokerGroups[0].Subjects) == 101
	})
	page("#delays", "Delayed messages", "delays", "Broker group g1", "and 1 more subjects with 1 pending")
	delayRows := func() (rows int, first []string) {
		t.Helper()
		if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll(".delay-subjects tr").length - 1`, &rows)); err != nil {
			t.Fatal(err)
		}
		return rows, cells(t, ctx, ".delay-subjects", "later-000")
	}
	if rows, first := delayRows(); rows != 100 || len(first) != 2 || first[1] != "2" {
		t.Errorf("the delayed messages' subjects: %d rows, later-000 %q; want 100, and later-000 with 2", rows, first)
	}
	page("#delays?all=1", "Delayed messages", "delays-all", "Broker group g1")
	if rows, _ := delayRows(); rows != 101 {
		t.Errorf("every subject of the delayed messages: %d rows, want 101", rows)
	}
	page("#messages", "Messages", "messages")
	// The browse form lists the subject's messages, as many as the Admin
	// API's listing, never consuming them, with a link to export them.
	zero := int64(0)
	listed, err := f.a.Messages(context.Background(), admin.MessageQuery{Subject: "orders", FromSeq: &zero})
	if err != nil || len(listed) != 1 {
		t.Fatalf("listing orders: %+v, %v", listed, err)
	}
	var rows int
	var exported string
	err = chromedp.Run(ctx,
		chromedp.SetValue(`#browse-form input[name="subject"]`, "orders", chromedp.ByQuery),
		chromedp.Click(`#browse-form button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#message-result .browse-table, #message-result #error`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll(".browse-table tr").length - 1`, &rows),
		chromedp.Evaluate(`fetch(document.getElementById("export-messages").href).then(r => r.text())`, &exported, awaitPromise),
		shot("browse"))
	if err != nil {
		t.Fatalf("browsing orders: %v", err)
	}
	if rows != len(listed[0].Messages) || rows != 5 {
		t.Errorf("the browse form lists %d messages of orders; the Admin API %d, want 5", rows, len(listed[0].Messages))
	}
	if lines := strings.Split(strings.TrimSpace(exported), "\n"); len(lines) != rows+1 || !strings.Contains(lines[rows], `"complete":true`) {
		t.Errorf("the listing's export: %d lines, want %d and an end:\n%s", len(lines), rows+1, exported)
	}
	// Paged by two, the listing's query is in the hash, and a broker
	// group's "next" link shows its next page, from the third message.
	var hash string
	third := fmt.Sprint(listed[0].Messages[2].Seq)
	err = chromedp.Run(ctx,
		chromedp.SetValue(`#browse-form input[name="limit"]`, "2", chromedp.ByQuery),
		chromedp.Click(`#browse-form button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#message-result a.next-page`, chromedp.ByQuery),
		chromedp.Click(`#message-result a.next-page`, chromedp.ByQuery),
		chromedp.WaitVisible(fmt.Sprintf(`(//table[contains(@class, "browse-table")]//tr)[2]/td[1][text()=%q]`, third), chromedp.BySearch),
		chromedp.Evaluate(`document.querySelectorAll(".browse-table tr").length - 1`, &rows),
		chromedp.Evaluate(`location.hash`, &hash))
	if err != nil {
		t.Fatalf("the next page of orders: %v", err)
	}
	if want := "#messages?subject=orders&limit=2&broker_group=g1&from_seq=" + third; hash != want || rows != 2 {
		t.Errorf("the next page: %d messages at %q, want 2 at %q", rows, hash, want)
	}

	page("#dead?subject=orders&group=billing", "Dead letters of billing", "dead", "Broker group g1: 2", "Export as JSON lines")
	// Each letter links to its message's lookup; the two fit one page, so
	// there is no next one.
	var deadLinks []string
	var hasNext bool
	if err := chromedp.Run(ctx,
		chromedp.Evaluate(`Array.from(document.querySelectorAll("a.dead-id")).map(a => a.getAttribute("href"))`, &deadLinks),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("#main a")).some(a => a.textContent === "next")`, &hasNext)); err != nil {
		t.Fatal(err)
	}
	if len(deadLinks) != 2 || !strings.HasPrefix(deadLinks[0], "#messages?id=") || hasNext {
		t.Errorf("the dead letters' links %q, a next page %t: want two lookups and no next", deadLinks, hasNext)
	}
	var deadExport string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`fetch(document.getElementById("export-dead").href).then(r => r.text())`, &deadExport, awaitPromise)); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(deadExport), "\n"); len(lines) != 3 || !strings.Contains(lines[0], `"dead_letter"`) || !strings.Contains(lines[2], `"complete":true`) {
		t.Errorf("the dead letters' export from the page:\n%s", deadExport)
	}

	err = chromedp.Run(ctx,
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
	// The group's page shows the resent letter owed again, as the Admin
	// API does.
	page("#group?subject=orders&group=billing", "billing of orders", "group-resent", "Dead letters (1)")
	sameLag("#group-table", "total", 1)
	// A setting changed in the form takes effect in the cluster.
	err = chromedp.Run(ctx,
		chromedp.Evaluate(`window.confirm = () => true`, nil),
		chromedp.SetValue(`#set-form input[name="max_in_flight"]`, "7", chromedp.ByQuery),
		chromedp.Click(`#set-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#action-result.ok`, chromedp.ByQuery))
	if err != nil {
		t.Fatalf("set from the page: %v", err)
	}
	if v, err := f.a.ConsumerGroup(context.Background(), "orders", "billing"); err != nil || v.Total.Settings.MaxInFlight != 7 {
		t.Errorf("billing after max in flight 7 was set in the page: %+v, %v", v.Total.Settings, err)
	}

	// The rest selected at once and resent after a confirmation naming
	// how many.
	var asked string
	err = chromedp.Run(ctx,
		chromedp.Evaluate(fmt.Sprintf("location.hash = %q", "#dead?subject=orders&group=billing&offset=0"), nil),
		chromedp.WaitVisible(`//h3[contains(., "Broker group g1: 1")]`, chromedp.BySearch),
		chromedp.Evaluate(`window.asked = ""; window.confirm = (q) => { window.asked = q; return true; }`, nil),
		chromedp.Click(".select-all", chromedp.ByQuery),
		chromedp.Click(".resend-selected", chromedp.ByQuery),
		chromedp.WaitVisible(`#action-result.ok`, chromedp.ByQuery),
		chromedp.Evaluate(`window.asked`, &asked))
	if err != nil {
		t.Fatalf("resending the selected: %v", err)
	}
	if asked != "Resend 1 dead letters of broker group g1?" {
		t.Errorf("the page asked %q", asked)
	}
	poll.Until(t, 10*time.Second, "no dead letter left", func() bool {
		v, err := f.a.ConsumerGroup(context.Background(), "orders", "billing")
		return err == nil && v.Total.DeadLetters == 0
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

// awaitPromise has Evaluate wait for the promise its script returns.
func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }

// cells returns the text of the cells of the row of the table sel whose
// first cell is first; nil if it has none.
func cells(t *testing.T, ctx context.Context, sel, first string) []string {
	t.Helper()
	var out []string
	err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`(() => {
		for (const r of document.querySelectorAll(%q + " tr")) {
			const c = Array.from(r.cells).map(x => x.textContent);
			if (c[0] === %q) return c;
		}
		return [];
	})()`, sel, first), &out))
	if err != nil {
		t.Fatalf("reading %s: %v", sel, err)
	}
	return out
}

// sendDelayed sends a message due in an hour or more to each of n
// subjects later-000.., and a second to later-000.
func sendDelayed(t *testing.T, f *fixture, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := qmq.NewProducer(f.meta)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range n + 1 {
		m := p.GenerateMessage(fmt.Sprintf("later-%03d", max(0, i-1)))
		m.SetDelay(time.Hour + time.Duration(i)*time.Minute)
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// sendN sends n messages to subject.
func sendN(t *testing.T, f *fixture, subject string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := qmq.NewProducer(f.meta)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range n {
		if err := p.SendMessage(ctx, p.GenerateMessage(subject)); err != nil {
			t.Fatal(err)
		}
	}
}

// browser starts headless Chromium for the test, with a 90 s deadline; problems
// returns the exceptions and console errors and warnings it saw.
func browser(t *testing.T) (ctx context.Context, problems func() []string) {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("no chromium on PATH: `make test` installs it (make chromium), or apt-get install chromium")
	}
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
	// Chromium started under a loaded machine now and then exits before it
	// listens ("chrome failed to start"): a start is tried three times,
	// each with a profile of its own, before the test fails.
	for try := 1; ; try++ {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(startChromium(t, path), 90*time.Second)
		t.Cleanup(cancel)
		chromedp.ListenTarget(ctx, listen)
		err := chromedp.Run(ctx) // starts the browser
		if err == nil {
			break
		}
		if try == 3 || !strings.Contains(err.Error(), "chrome failed to start") {
			t.Fatalf("starting Chromium (try %d): %v", try, err)
		}
		t.Logf("Chromium did not start (try %d), again: %.300v", try, err)
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// startChromium returns the context of a new headless Chromium for the
// test, with a profile of its own outside the test's temporary
// directories (Chromium's helper processes may still write to it when the
// browser is gone, which fails the test's removal of them), both removed
// when the test ends.
func startChromium(t testing.TB, path string) context.Context {
	t.Helper()
	profile, err := os.MkdirTemp("", "qmq-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for os.RemoveAll(profile) != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	})
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(profile), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	bctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "unknown IPAddressSpace value") {
			t.Log(msg) // but events of a newer Chromium this cdproto does not know: noise
		}
	}))
	t.Cleanup(cancel)
	return bctx
}

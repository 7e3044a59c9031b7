package console_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/console"
)

// jsonLines splits an export into its lines and its end.
func jsonLines(t *testing.T, b []byte) ([]json.RawMessage, console.ExportEnd) {
	t.Helper()
	var lines []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		lines = append(lines, append(json.RawMessage(nil), sc.Bytes()...))
	}
	if len(lines) == 0 {
		t.Fatalf("an export of no line: %q", b)
	}
	var end console.ExportEnd
	if err := json.Unmarshal(lines[len(lines)-1], &end); err != nil || !end.End {
		t.Fatalf("an export's last line %s is no end (%v)", lines[len(lines)-1], err)
	}
	return lines[:len(lines)-1], end
}

// An export of a listing writes its messages as JSON lines, page after
// page, up to its limit, and says whether it holds them all; a dead
// letter export writes each dead letter whole; bad parameters are
// refused with a JSON error before any line, and nothing is consumed.
func TestExport(t *testing.T) {
	f := start(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := qmq.NewProducer(f.meta)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var ids []string
	for range 25 {
		m := p.GenerateMessage("ledger")
		m.SetBody([]byte("entry"))
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID())
	}

	export := func(path string) (int, http.Header, []byte) {
		t.Helper()
		res, err := f.srv.Client().Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(res.Body)
		return res.StatusCode, res.Header, buf.Bytes()
	}
	// budget=10 makes the listing take several pages: each reads at most
	// ten entries of the consume log.
	st, hd, b := export("/api/v1/subjects/ledger/messages/export?body=1&budget=10")
	if st != 200 || !strings.HasPrefix(hd.Get("Content-Type"), "application/jsonl") || !strings.Contains(hd.Get("Content-Disposition"), `attachment; filename="ledger-messages.jsonl"`) {
		t.Fatalf("export: %d %v %s", st, hd, b)
	}
	lines, end := jsonLines(t, b)
	if !end.Complete || end.Messages != 25 || len(lines) != 25 {
		t.Fatalf("export of 25 messages: %d lines, end %+v", len(lines), end)
	}
	for i, l := range lines {
		var m admin.StoredMessage
		if err := json.Unmarshal(l, &m); err != nil || m.ID != ids[i] || string(m.Body) != "entry" || m.Subject != "ledger" {
			t.Errorf("line %d: %s (%v), want message %s with its body", i, l, err, ids[i])
		}
	}

	st, _, b = export("/api/v1/subjects/ledger/messages/export?limit=7&budget=3")
	lines, end = jsonLines(t, b)
	if st != 200 || end.Complete || end.Messages != 7 || len(lines) != 7 || !strings.Contains(end.Reason, "limit of 7") {
		t.Errorf("export limited to 7: %d, %d lines, end %+v", st, len(lines), end)
	}
	st, _, b = export("/api/v1/subjects/ledger/messages/export?limit=25")
	if _, end = jsonLines(t, b); st != 200 || !end.Complete || end.Messages != 25 {
		t.Errorf("export limited to exactly what there is: %d, end %+v", st, end)
	}

	for path, want := range map[string]int{
		"/api/v1/subjects/ledger/messages/export?limit=0":                             400,
		"/api/v1/subjects/ledger/messages/export?limit=10001":                         400,
		"/api/v1/subjects/ledger/messages/export?limit=1&limit=2":                     400,
		"/api/v1/subjects/ledger/messages/export?nope=1":                              400,
		"/api/v1/subjects/bad%20name/messages/export":                                 400,
		"/api/v1/subjects/ledger/consumer-groups/none/dead-letters/export?limit=1001": 400,
		"/api/v1/subjects/ledger/consumer-groups/none/dead-letters/export?q=x":        400,
	} {
		st, hd, b := export(path)
		var e struct{ Error, Code string }
		if st != want || !strings.HasPrefix(hd.Get("Content-Type"), "application/json;") || json.Unmarshal(b, &e) != nil || e.Error == "" {
			t.Errorf("GET %s: %d %s %s, want %d with a JSON error", path, st, hd.Get("Content-Type"), b, want)
		}
	}
	if st, _, _ := export("/api/v1/subjects/ledger/messages/export?limit=10000"); st != 200 {
		t.Errorf("an export at its limit's bound: %d", st)
	}

	deadLetters(t, f, "orders", "billing", 3)
	st, hd, b = export("/api/v1/subjects/orders/consumer-groups/billing/dead-letters/export")
	lines, end = jsonLines(t, b)
	if st != 200 || !strings.Contains(hd.Get("Content-Disposition"), "orders-billing-dead-letters.jsonl") || !end.Complete || len(lines) != 3 {
		t.Fatalf("dead letter export: %d, %d lines, end %+v: %s", st, len(lines), end, b)
	}
	for _, l := range lines {
		var d console.DeadLetterLine
		if err := json.Unmarshal(l, &d); err != nil || d.BrokerGroup != "g1" || d.DeadLetter.ID == "" || d.DeadLetter.Deliveries != 1 {
			t.Errorf("dead letter line %s (%v)", l, err)
		}
	}
	st, _, b = export("/api/v1/subjects/orders/consumer-groups/billing/dead-letters/export?offset=1&limit=1")
	if lines, end = jsonLines(t, b); st != 200 || len(lines) != 1 || end.Complete {
		t.Errorf("one dead letter from the second: %d, %d lines, end %+v", st, len(lines), end)
	}
	// Nothing was consumed: the dead letters are kept, the ledger has no group.
	v, err := f.a.ConsumerGroup(ctx, "orders", "billing")
	if err != nil || v.Total.DeadLetters != 3 {
		t.Errorf("after the exports: %+v, %v", v, err)
	}
	if r, err := f.a.Route(ctx, "ledger"); err != nil || len(r.ConsumerGroups) != 0 {
		t.Errorf("the ledger's route after its export: %+v, %v", r, err)
	}
}

package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
)

// The message endpoints answer what admin's lookups do: a message by id
// with its body, a subject's messages by time, tag and key, and refuse
// parameters past their bounds.
func TestMessageEndpoints(t *testing.T) {
	f := start(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := qmq.NewProducer(f.meta)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var ids []string
	for i := range 5 {
		m := p.GenerateMessage("orders")
		m.SetBody([]byte("body"))
		if i == 3 {
			m.SetKey("order-42")
			m.AddTag("vip")
		}
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID())
	}

	var byID struct {
		Messages []admin.StoredMessage `json:"messages"`
	}
	f.get(t, "/api/v1/messages/"+ids[3]+"?body=1", &byID)
	if len(byID.Messages) != 1 || byID.Messages[0].ID != ids[3] || byID.Messages[0].Key != "order-42" || string(byID.Messages[0].Body) != "body" {
		t.Errorf("message by id: %+v", byID)
	}
	f.get(t, "/api/v1/messages/nope", &byID)
	if len(byID.Messages) != 0 {
		t.Errorf("a missing id answered %+v", byID)
	}

	type listing struct {
		Pages []admin.MessagePage `json:"pages"`
	}
	count := func(l listing) (n int, first string) {
		for _, pg := range l.Pages {
			for _, m := range pg.Messages {
				if n == 0 {
					first = m.ID
				}
				n++
			}
		}
		return n, first
	}
	var l listing
	f.get(t, "/api/v1/subjects/orders/messages?since=1h", &l)
	if n, _ := count(l); n != 5 {
		t.Errorf("listing since 1h: %d messages, want 5: %+v", n, l)
	}
	f.get(t, "/api/v1/subjects/orders/messages?since=1h&key=order-42", &l)
	if n, first := count(l); n != 1 || first != ids[3] {
		t.Errorf("listing by key: %+v", l)
	}
	f.get(t, "/api/v1/subjects/orders/messages?tag=vip", &l)
	if n, first := count(l); n != 1 || first != ids[3] {
		t.Errorf("browsing by tag: %+v", l)
	}
	f.get(t, "/api/v1/subjects/orders/messages?from_seq=0&limit=2", &l)
	if n, _ := count(l); n != 2 || len(l.Pages) != 1 || l.Pages[0].Next != 2 {
		t.Errorf("a page of 2: %+v", l)
	}

	for _, path := range []string{
		"/api/v1/subjects/orders/messages?limit=1001",
		"/api/v1/subjects/orders/messages?limit=0",
		"/api/v1/subjects/orders/messages?budget=1000001",
		"/api/v1/subjects/orders/messages?since=1h&from_seq=0",
		"/api/v1/subjects/orders/messages?since=tomorrow",
		"/api/v1/subjects/orders/messages?since=1h&until=2h",
		"/api/v1/subjects/orders/messages?from_seq=-1",
		"/api/v1/subjects/orders/messages?nope=1",
		"/api/v1/subjects/orders/messages?limit=1&limit=2",
		"/api/v1/subjects/bad%20name/messages",
		"/api/v1/messages/x?tag=t",
	} {
		if st, b := f.do(t, nil, "GET", path, "", nil); st != 400 {
			t.Errorf("GET %s: %d %s, want 400", path, st, b)
		}
	}
	if st, _ := f.do(t, nil, "GET", "/api/v1/subjects/orders/messages?limit=1000", "", nil); st != 200 {
		t.Errorf("a listing at the limit: %d", st)
	}
}

// Without authentication the console answers requests to an address or
// localhost only: a name another site controls (DNS rebinding) is refused.
func TestNoAuthAnswersLiteralHostsOnly(t *testing.T) {
	f := start(t, false)
	for host, want := range map[string]int{"attacker.example": 421, "attacker.example:6280": 421, "localhost:6280": 200, "127.0.0.1": 200, "[::1]:80": 200} {
		req, err := http.NewRequest("GET", f.srv.URL+"/api/v1/session", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// GET /api/v1/messages/{id} answers each message's timeline: sent, handed
// out to the group's consumer, acked.
func TestMessageTimelineEndpoint(t *testing.T) {
	f := start(t, false)
	id := sendPullAck(t, f, "invoices", "accounts")
	var byID struct {
		Messages []admin.StoredMessage `json:"messages"`
	}
	f.get(t, "/api/v1/messages/"+id, &byID)
	if len(byID.Messages) != 1 {
		t.Fatalf("message by id: %+v", byID)
	}
	var got []string
	for _, e := range byID.Messages[0].Timeline {
		got = append(got, e.Kind+"/"+e.ConsumerGroup)
	}
	if strings.Join(got, ",") != "sent/,handed-out/accounts,acked/accounts" || byID.Messages[0].TimelineMore {
		t.Errorf("timeline %v (more %v), want sent, handed-out and acked by accounts", got, byID.Messages[0].TimelineMore)
	}
}

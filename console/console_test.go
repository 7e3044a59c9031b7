package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/console"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// fixture is a metaserver and a broker group g1, an admin client of them,
// and the console's API served over httptest.
type fixture struct {
	a        *admin.Client
	srv      *httptest.Server
	meta     string
	metaNode *server.MetaNode
}

func start(t *testing.T, auth bool) *fixture {
	t.Helper()
	m := testcluster.Meta(t, nil)
	b := testcluster.Broker(t, testcluster.Registered("g1", m.ClientAddr()))
	a, err := admin.New(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	poll.Until(t, 30*time.Second, "g1 registered with a leader", func() bool {
		c, err := a.Cluster(context.Background())
		return err == nil && len(c.BrokerGroups) == 1 && c.BrokerGroups[0].Leader != ""
	})
	// Two more nodes join g1: a three-node broker group.
	for _, id := range []string{"g1-n2", "g1-n3"} {
		cfg := testcluster.BrokerConfig(t)
		testcluster.Registered("g1", m.ClientAddr())(&cfg)
		cfg.ID, cfg.Bootstrap = id, false
		n, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = a.Join(ctx, "g1", id, cfg.RaftAddr, n.ClientAddr())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 30*time.Second, "g1's three nodes registered and following", func() bool {
		c, err := a.Cluster(context.Background())
		if err != nil || len(c.BrokerGroups) != 1 || c.BrokerGroups[0].Leader == "" || len(c.BrokerGroups[0].Nodes) != 3 {
			return false
		}
		for _, n := range c.BrokerGroups[0].Nodes {
			if n.State != "Leader" && n.State != "Follower" {
				return false
			}
		}
		return true
	})
	h, err := console.New(console.Config{Servers: []string{b.ClientAddr(), m.ClientAddr()}, Auth: auth, Logger: testcluster.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{a: a, srv: srv, meta: m.ClientAddr(), metaNode: m}
}

// do sends a request; a POST carries the CSRF header csrf unless it is "".
func (f *fixture) do(t *testing.T, c *http.Client, method, path, body string, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if c == nil {
		c = f.srv.Client()
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for k, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("%s %s: %s %q, want %q", method, path, k, got, want)
		}
	}
	if !strings.HasPrefix(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("%s %s: CSP %q", method, path, res.Header.Get("Content-Security-Policy"))
	}
	if res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("%s %s: a CORS header", method, path)
	}
	return res.StatusCode, b
}

func (f *fixture) get(t *testing.T, path string, out any) {
	t.Helper()
	st, b := f.do(t, nil, "GET", path, "", nil)
	if st != 200 {
		t.Fatalf("GET %s: %d %s", path, st, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

var csrfOK = map[string]string{"X-QMQ-CSRF": "1"}

// deadLetters sends n messages to subject and makes each a dead letter of
// group (one delivery allowed, every one nacked).
func deadLetters(t *testing.T, f *fixture, subject, group string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	one := uint32(1)
	if _, err := f.a.SetConsumerGroup(ctx, subject, group, admin.ConsumerGroupChanges{MaxDeliveries: &one, Start: 1}); err != nil {
		t.Fatal(err)
	}
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
	c, err := qmq.NewPuller(f.meta, subject, group, qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := 0
	for got < n {
		msgs, err := c.Pull(ctx, n, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Nack(ctx, nil, msgs...); err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
	}
	poll.Until(t, 30*time.Second, "dead letters kept", func() bool {
		v, err := f.a.ConsumerGroup(ctx, subject, group)
		return err == nil && v.Total.DeadLetters == n
	})
}

func TestReadEndpointsEqualAdmin(t *testing.T) {
	f := start(t, false)
	deadLetters(t, f, "orders", "billing", 3)
	ctx := context.Background()

	var c console.ClusterView
	f.get(t, "/api/v1/cluster", &c)
	if len(c.BrokerGroups) != 1 || c.BrokerGroups[0].Name != "g1" || c.BrokerGroups[0].Leader == "" ||
		len(c.BrokerGroups[0].NodeStatus) != 3 || c.BrokerGroups[0].NodeStatus[2].Status == nil || c.Meta == nil || len(c.MetaNodes) == 0 {
		t.Errorf("cluster: %+v", c)
	}

	var g admin.ConsumerGroupView
	f.get(t, "/api/v1/subjects/orders/consumer-groups/billing", &g)
	want, err := f.a.ConsumerGroup(ctx, "orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	if g.Total.Lag != want.Total.Lag || g.Total.DeadLetters != 3 || g.Total.Settings.MaxDeliveries != 1 || len(g.BrokerGroups) != 1 {
		t.Errorf("consumer group via the API %+v, admin says %+v", g.Total, want.Total)
	}
	var gs struct {
		ConsumerGroups []admin.ConsumerGroupView `json:"consumer_groups"`
	}
	f.get(t, "/api/v1/subjects/orders/consumer-groups", &gs)
	if len(gs.ConsumerGroups) != 1 || gs.ConsumerGroups[0].Group != "billing" {
		t.Errorf("consumer groups: %+v", gs)
	}
	// Given offset, limit or q, a page of them by name prefix, with its total.
	for q, want := range map[string][2]int{"?q=bil&offset=0&limit=100": {1, 1}, "?q=x": {0, 0}, "?offset=1": {1, 0}} {
		var page struct {
			Total          int                       `json:"total"`
			Limit          int                       `json:"limit"`
			ConsumerGroups []admin.ConsumerGroupView `json:"consumer_groups"`
		}
		f.get(t, "/api/v1/subjects/orders/consumer-groups"+q, &page)
		if page.Total != want[0] || len(page.ConsumerGroups) != want[1] || page.Limit != console.DefaultLimit {
			t.Errorf("consumer groups%s: total %d, %d groups, limit %d; want %v", q, page.Total, len(page.ConsumerGroups), page.Limit, want)
		}
	}
	var dl console.DeadLettersView
	f.get(t, "/api/v1/subjects/orders/consumer-groups/billing/dead-letters?limit=2", &dl)
	if len(dl.Pages) != 1 || dl.Pages[0].Total != 3 || len(dl.Pages[0].Letters) != 2 {
		t.Errorf("dead letters: %+v", dl)
	}
	var d map[string][]admin.BrokerGroupDelays
	f.get(t, "/api/v1/delays", &d)
	if len(d["broker_groups"]) != 1 {
		t.Errorf("delays: %+v", d)
	}
	// The first look (a group's page, whose lag is sampled from then on,
	// beside the groups that owe most) starts the sampler, which samples
	// at once; the look waits a while for its point.
	var h struct{ Points []console.Point }
	poll.Until(t, 30*time.Second, "the history's first point", func() bool {
		f.get(t, "/api/v1/history?subject=orders&group=billing", &h)
		return len(h.Points) > 0
	})
	if h.Points[len(h.Points)-1].Groups["orders/billing"] != want.Total.Lag ||
		h.Points[len(h.Points)-1].Watched["orders/billing"] != want.Total.Lag {
		t.Errorf("history: %+v, lag %d", h, want.Total.Lag)
	}

	for path, wantStatus := range map[string]int{
		"/api/v1/subjects/orders/consumer-groups/nobody":                         404,
		"/api/v1/subjects/bad%20name/consumer-groups":                            400,
		"/api/v1/subjects/orders/consumer-groups/billing/dead-letters?offset=-1": 400,
		"/api/v1/nothing":                                       404,
		"/api/v1/history?subject=orders":                        400,
		"/api/v1/history?subject=&group=":                       400,
		"/api/v1/history?subject=%zz&group=billing":             400,
		"/api/v1/history?subject=orders&group=bad%2Fname":       400,
		"/api/v1/history?subject=orders&group=billing&limit=10": 400,
	} {
		st, b := f.do(t, nil, "GET", path, "", nil)
		var e struct{ Error, Code string }
		if st != wantStatus || json.Unmarshal(b, &e) != nil || e.Error == "" || e.Code == "" {
			t.Errorf("GET %s: %d %s, want %d with a JSON error", path, st, b, wantStatus)
		}
	}
}

// A resend through the API gives a dead letter back to its group.
func TestResendAndPurge(t *testing.T) {
	f := start(t, false)
	deadLetters(t, f, "jobs", "work", 3)
	ctx := context.Background()
	pages, err := f.a.DeadLetters(ctx, "jobs", "work", 0, 10)
	if err != nil || len(pages) != 1 || len(pages[0].Letters) != 3 {
		t.Fatalf("dead letters: %+v, %v", pages, err)
	}
	seq := pages[0].Letters[0].Seq
	base := "/api/v1/subjects/jobs/consumer-groups/work/dead-letters/"
	st, b := f.do(t, nil, "POST", base+"resend", fmt.Sprintf(`{"broker_group":"g1","seqs":[%d]}`, seq), csrfOK)
	if st != 200 || !strings.Contains(string(b), `"done":1`) {
		t.Fatalf("resend: %d %s", st, b)
	}
	v, err := f.a.ConsumerGroup(ctx, "jobs", "work")
	if err != nil || v.Total.DeadLetters != 2 || v.Total.Lag == 0 {
		t.Fatalf("after the resend: %+v, %v; want 2 dead letters and the message owed again", v, err)
	}
	st, b = f.do(t, nil, "POST", base+"purge", `{"all":true}`, csrfOK)
	if st != 200 {
		t.Fatalf("purge: %d %s", st, b)
	}
	if v, err := f.a.ConsumerGroup(ctx, "jobs", "work"); err != nil || v.Total.DeadLetters != 0 {
		t.Fatalf("after the purge: %+v, %v", v, err)
	}
	st, b = f.do(t, nil, "POST", base+"resend", `{"broker_group":"g1","seqs":[999]}`, csrfOK)
	if st != 200 || !strings.Contains(string(b), `"done":0`) {
		t.Errorf("resend of a dead letter not kept: %d %s", st, b)
	}
	for _, body := range []string{`{"all":true,"seqs":[1]}`, `{}`, `{"broker_group":"g1","seqs":[-1]}`, `{"x":1}`, `[`} {
		if st, b := f.do(t, nil, "POST", base+"resend", body, csrfOK); st != 400 {
			t.Errorf("resend %s: %d %s, want 400", body, st, b)
		}
	}
	if st, b := f.do(t, nil, "POST", base+"resend", `{"broker_group":"g9","seqs":[1]}`, csrfOK); st != 404 {
		t.Errorf("resend in a broker group not in the route: %d %s, want 404", st, b)
	}
}

func TestSetAndReset(t *testing.T) {
	f := start(t, false)
	deadLetters(t, f, "pay", "ledger", 2)
	ctx := context.Background()
	p := "/api/v1/subjects/pay/consumer-groups/ledger/"
	if st, b := f.do(t, nil, "POST", p+"set", `{"max_deliveries":7,"ack_wait":"9s"}`, csrfOK); st != 200 {
		t.Fatalf("set: %d %s", st, b)
	}
	v, err := f.a.ConsumerGroup(ctx, "pay", "ledger")
	if err != nil || v.Total.Settings.MaxDeliveries != 7 || v.Total.Settings.AckWait != 9*time.Second {
		t.Fatalf("after set: %+v, %v", v, err)
	}
	if st, b := f.do(t, nil, "POST", p+"set", `{"max_deliveries":0}`, csrfOK); st != 400 {
		t.Errorf("set out of the broker's bounds: %d %s, want 400", st, b)
	}
	if st, b := f.do(t, nil, "POST", p+"reset", `{"to":"earliest"}`, csrfOK); st != 200 {
		t.Fatalf("reset: %d %s", st, b)
	}
	if v, err := f.a.ConsumerGroup(ctx, "pay", "ledger"); err != nil || v.Total.Backlog != 2 {
		t.Fatalf("after reset to earliest: %+v, %v; want both messages owed again", v, err)
	}
	if st, b := f.do(t, nil, "POST", p+"reset", `{"to":"yesterday"}`, csrfOK); st != 400 {
		t.Errorf("reset to nowhere: %d %s", st, b)
	}
}

func TestCSRFAndLimits(t *testing.T) {
	f := start(t, false)
	p := "/api/v1/subjects/s/consumer-groups/g/reset"
	for name, hdr := range map[string]map[string]string{
		"no header":         nil,
		"cross-site origin": {"X-QMQ-CSRF": "1", "Origin": "http://evil.example"},
		"cross-site fetch":  {"X-QMQ-CSRF": "1", "Sec-Fetch-Site": "cross-site"},
		"origin not a URL":  {"X-QMQ-CSRF": "1", "Origin": "null"},
	} {
		if st, b := f.do(t, nil, "POST", p, `{"to":"latest"}`, hdr); st != 403 || !strings.Contains(string(b), `"csrf"`) {
			t.Errorf("%s: %d %s, want 403 csrf", name, st, b)
		}
	}
	same := map[string]string{"X-QMQ-CSRF": "1", "Origin": f.srv.URL, "Sec-Fetch-Site": "same-origin"}
	if st, b := f.do(t, nil, "POST", p, `{"to":"latest"}`, same); st != 200 {
		t.Errorf("same origin: %d %s", st, b)
	}
	big := `{"to":"latest","x":"` + strings.Repeat("a", console.MaxBody) + `"}`
	if st, b := f.do(t, nil, "POST", p, big, csrfOK); st != 413 {
		t.Errorf("a body over the limit: %d %.200s, want 413", st, b)
	}
	if st, _ := f.do(t, nil, "OPTIONS", p, "", map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}); st == 200 || st == 204 {
		t.Errorf("a preflight answered %d", st)
	}
	if st, _ := f.do(t, nil, "GET", p, "", nil); st != 404 && st != 405 {
		t.Errorf("GET of an action: %d, want it refused", st)
	}
}

func TestSubjectsPagination(t *testing.T) {
	f := start(t, false)
	ctx := context.Background()
	for i := range 25 {
		if _, err := f.a.Assign(ctx, fmt.Sprintf("s.%02d", i), nil, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.a.Assign(ctx, "other", nil, 1); err != nil {
		t.Fatal(err)
	}
	var p console.SubjectsPage
	f.get(t, "/api/v1/subjects?q=s.&offset=20&limit=10", &p)
	if p.Total != 25 || len(p.Subjects) != 5 || p.Subjects[0].Subject != "s.20" {
		t.Errorf("page: total %d, %d subjects %+v", p.Total, len(p.Subjects), p.Subjects)
	}
	f.get(t, "/api/v1/subjects", &p)
	if p.Total != 26 || len(p.Subjects) != 26 || p.Limit != console.DefaultLimit {
		t.Errorf("default page: %+v", p)
	}
	f.get(t, fmt.Sprintf("/api/v1/subjects?limit=%d", console.MaxLimit), &p)
	if p.Limit != console.MaxLimit {
		t.Errorf("limit at the max: %+v", p.Limit)
	}
	for _, q := range []string{"limit=0", fmt.Sprintf("limit=%d", console.MaxLimit+1), "offset=-1", "offset=x", "limit=1&limit=2", "q=" + strings.Repeat("a", 201)} {
		if st, b := f.do(t, nil, "GET", "/api/v1/subjects?"+q, "", nil); st != 400 {
			t.Errorf("subjects?%.40s: %d %s, want 400", q, st, b)
		}
	}
}

// With Auth, the API takes credentials (Basic, or a session from login)
// and a session's POSTs carry its own CSRF token.
func TestAuthSessions(t *testing.T) {
	f := start(t, true)
	if st, b := f.do(t, nil, "GET", "/api/v1/cluster", "", nil); st != 401 {
		t.Fatalf("no credentials: %d %s", st, b)
	}
	// A challenge for curl and a page opened by hand, none for the
	// console's own requests, which a browser would hold behind a
	// password prompt over the login form.
	for mode, want := range map[string]string{"": `Basic realm="qmq"`, "navigate": `Basic realm="qmq"`, "cors": "", "same-origin": ""} {
		req, _ := http.NewRequest("GET", f.srv.URL+"/api/v1/session", nil)
		if mode != "" {
			req.Header.Set("Sec-Fetch-Mode", mode)
		}
		res, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 401 || res.Header.Get("WWW-Authenticate") != want {
			t.Errorf("no credentials, Sec-Fetch-Mode %q: %d, WWW-Authenticate %q; want 401, %q", mode, res.StatusCode, res.Header.Get("WWW-Authenticate"), want)
		}
	}
	basic := func(r map[string]string) map[string]string { return r }
	_ = basic
	req, _ := http.NewRequest("GET", f.srv.URL+"/api/v1/cluster", nil)
	req.SetBasicAuth("ops", "s3cret")
	if res, err := f.srv.Client().Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("Basic auth: %v %v", res, err)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	if st, b := f.do(t, c, "POST", "/api/v1/login", `{"code":"ops","secret":"s3cret"}`, nil); st != 403 {
		t.Errorf("login without the CSRF header: %d %s", st, b)
	}
	if st, b := f.do(t, c, "POST", "/api/v1/login", `{"code":"bad name","secret":"x"}`, csrfOK); st != 400 {
		t.Errorf("login with a bad code: %d %s", st, b)
	}
	st, b := f.do(t, c, "POST", "/api/v1/login", `{"code":"ops","secret":"s3cret"}`, csrfOK)
	var s struct{ App, CSRF string }
	if st != 200 || json.Unmarshal(b, &s) != nil || s.App != "ops" || len(s.CSRF) != 64 {
		t.Fatalf("login: %d %s", st, b)
	}
	u, _ := http.NewRequest("GET", f.srv.URL, nil)
	cookies := jar.Cookies(u.URL)
	if len(cookies) != 1 {
		t.Fatalf("cookies after login: %v", cookies)
	}
	if st, b := f.do(t, c, "GET", "/api/v1/session", "", nil); st != 200 || !strings.Contains(string(b), s.CSRF) {
		t.Errorf("session: %d %s", st, b)
	}
	p := "/api/v1/subjects/s/consumer-groups/g/reset"
	if st, b := f.do(t, c, "POST", p, `{"to":"latest"}`, csrfOK); st != 403 {
		t.Errorf("a session's POST with a wrong token: %d %s", st, b)
	}
	if st, b := f.do(t, c, "POST", p, `{"to":"latest"}`, map[string]string{"X-QMQ-CSRF": s.CSRF}); st != 200 {
		t.Errorf("a session's POST with its token: %d %s", st, b)
	}
	if st, b := f.do(t, c, "POST", "/api/v1/logout", "", map[string]string{"X-QMQ-CSRF": s.CSRF}); st != 200 {
		t.Errorf("logout: %d %s", st, b)
	}
	if st, b := f.do(t, c, "GET", "/api/v1/cluster", "", nil); st != 401 {
		t.Errorf("after logout: %d %s", st, b)
	}
}

func TestConsoleFiles(t *testing.T) {
	f := start(t, false)
	for _, p := range []string{"/", "/app.js", "/app.css"} {
		st, b := f.do(t, nil, "GET", p, "", nil)
		if st != 200 || len(b) < 100 {
			t.Errorf("GET %s: %d, %d bytes", p, st, len(b))
		}
		if strings.Contains(string(b), "innerHTML") || p == "/" && strings.Contains(string(b), "<script>") {
			t.Errorf("%s renders HTML from data, or has an inline script", p)
		}
	}
}

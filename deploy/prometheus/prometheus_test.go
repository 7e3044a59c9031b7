package prometheus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/qmqgo/qmq/deploy/internal/proctest"
)

const rulesFile = "qmq-rules.yaml"

type rules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
			For   string `yaml:"for"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) rules {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var r rules
	if err := yaml.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return r
}

// dashboardExprs are the PromQL expressions of every panel's targets.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../grafana/qmq-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("qmq-dashboard.json: %v", err)
	}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if len(exprs) == 0 {
		t.Fatal("the dashboard has no query")
	}
	return exprs
}

var metricName = regexp.MustCompile(`\bqmq_[a-z0-9_]*[a-z0-9]`)

// metricNames are the metric names expressions mention, a histogram's
// _bucket, _count and _sum series named by the histogram.
func metricNames(exprs []string) []string {
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			for _, suf := range []string{"_bucket", "_count", "_sum"} {
				if strings.HasSuffix(n, "_seconds"+suf) {
					n = strings.TrimSuffix(n, suf)
				}
			}
			seen[n] = true
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func TestMetricNames(t *testing.T) {
	got := metricNames([]string{`histogram_quantile(0.99, sum by (le) (rate(qmq_request_seconds_bucket{type="send"}[5m])))`,
		`max by (subject) (qmq_consumer_group_lag) > 1000 and qmq_raft_last_index - qmq_raft_applied_index`, `qmq_commit_seconds_count`,
		`histogram_quantile(0.99, sum by (command, le) (rate(qmq_apply_seconds_bucket[5m])))`})
	want := []string{"qmq_apply_seconds", "qmq_commit_seconds", "qmq_consumer_group_lag", "qmq_raft_applied_index", "qmq_raft_last_index", "qmq_request_seconds"}
	if !slices.Equal(got, want) {
		t.Fatalf("metricNames: %v, want %v", got, want)
	}
}

// TestRulesCheck runs promtool check rules on the shipped rules.
func TestRulesCheck(t *testing.T) {
	promtool := need(t, "promtool")
	out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
	// The example configuration, with the rules it loads.
	if out, err := exec.Command(promtool, "check", "config", "prometheus.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check config prometheus.yml: %v\n%s", err, out)
	}
	r := loadRules(t)
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" || rule.Expr == "" {
				t.Errorf("group %s: a rule without alert or expr: %+v", g.Name, rule)
			}
			if d, err := time.ParseDuration(rule.For); err != nil || d < time.Minute {
				t.Errorf("%s: for: %q, want at least 1m (the test shortens it, not the shipped file)", rule.Alert, rule.For)
			}
		}
	}
}

func need(t *testing.T, prog string) string {
	t.Helper()
	p, err := exec.LookPath(prog)
	if err != nil {
		t.Fatalf("%s is not installed: run `make prometheus` (Debian's prometheus package)", prog)
	}
	return p
}

// freeAddr is a free TCP port on ip.
func freeAddr(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// api asks Prometheus's HTTP API and decodes its data into v.
func api(base, path string, q url.Values, v any) error {
	resp, err := http.Get(base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, b)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s %s: %s", path, q.Encode(), r.Error)
	}
	return json.Unmarshal(r.Data, v)
}

var forLine = regexp.MustCompile(`(?m)^(\s+for:\s*)\S+$`)

// TestPrometheus runs a metaserver and a one-node broker group, sends and
// consumes through them, scrapes them with a real Prometheus loading the
// rules (their for: shortened to 1s), and checks that every metric the
// rules and the dashboard name is served, that every alert expression
// evaluates, and that stopping the broker group's only node makes
// QMQBrokerGroupLeaderless fire.
func TestPrometheus(t *testing.T) {
	promBin := need(t, "prometheus")
	r := loadRules(t)
	bin := proctest.Binaries(t)
	qmqd, qmqctl := filepath.Join(bin, "qmqd"), filepath.Join(bin, "qmqctl")
	dir := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}

	const metaIP, brokerIP, promIP = "127.0.7.1", "127.0.7.2", "127.0.7.3"
	metaListen, metaHTTP := freeAddr(t, metaIP), freeAddr(t, metaIP)
	brokerListen, brokerHTTP := freeAddr(t, brokerIP), freeAddr(t, brokerIP)
	// TLS, as a production cluster runs, so that the certificate's expiry
	// is served: every process reads its files from QMQ_TLS_*. The HTTP
	// ports are --open-http: Prometheus, as a kubelet's probe, presents no
	// client certificate (it verifies the nodes' against the CA).
	certs := filepath.Join(dir, "certs")
	ctx0, cancel0 := context.WithTimeout(context.Background(), 30*time.Second)
	if out, err := proctest.Run(ctx0, qmqctl, []string{"tls", "init", "--dir", certs, "--node", "m1=" + metaIP, "--node", "b1=" + brokerIP, "--client", "ctl"}, env); err != nil {
		t.Fatalf("qmqctl tls init: %v\n%s", err, out)
	}
	cancel0()
	ca := "QMQ_TLS_CA=" + filepath.Join(certs, "ca.pem")
	nodeEnv := func(id string) []string {
		return append(slices.Clone(env), ca, "QMQ_TLS_CERT="+filepath.Join(certs, id+".pem"), "QMQ_TLS_KEY="+filepath.Join(certs, id+"-key.pem"))
	}
	env = append(env, ca, "QMQ_TLS_CERT="+filepath.Join(certs, "ctl.pem"), "QMQ_TLS_KEY="+filepath.Join(certs, "ctl-key.pem")) // qmqctl's
	meta := &proctest.Proc{Name: "meta", Path: qmqd, Env: nodeEnv("m1"), Log: filepath.Join(dir, "meta.log"), Args: []string{"meta",
		"--id", "m1", "--data", filepath.Join(dir, "m1"), "--listen", metaListen, "--raft", freeAddr(t, metaIP),
		"--http", metaHTTP, "--open-http", "--bootstrap", "--group-timeout", "2s"}}
	broker := &proctest.Proc{Name: "broker", Path: qmqd, Env: nodeEnv("b1"), Log: filepath.Join(dir, "broker.log"), Args: []string{"broker",
		"--id", "b1", "--broker-group", "g1", "--data", filepath.Join(dir, "b1"), "--listen", brokerListen,
		"--raft", freeAddr(t, brokerIP), "--http", brokerHTTP, "--open-http", "--meta", metaListen, "--bootstrap", "--min-free-disk", "1"}}
	meta.Start(t)
	broker.Start(t)
	for _, p := range []struct {
		proc *proctest.Proc
		url  string
	}{{meta, "https://" + metaHTTP + "/readyz"}, {broker, "https://" + brokerHTTP + "/readyz"}} {
		proctest.Poll(t, 30*time.Second, p.proc.Name+" ready", func() error {
			if err := proctest.Get(p.url); err != nil {
				return fmt.Errorf("%v; log:\n%s", err, p.proc.Tail())
			}
			return nil
		})
	}

	// Traffic, so that every labelled series exists: sends, a consumer
	// group that acks some and fails one to its dead letters, a delayed
	// message, and a request refused with an error code.
	ctl := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return proctest.Run(ctx, qmqctl, append([]string{"--server", metaListen}, args...), env)
	}
	proctest.Poll(t, 30*time.Second, "a first send", func() error {
		out, err := ctl("send", "--subject", "orders", "--timeout", "5s", "first")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	for _, args := range [][]string{
		{"consume", "--subject", "orders", "--group", "billing", "--start", "earliest", "--count", "1"},
		{"send", "--subject", "orders", "--count", "5", "more"},
		{"send", "--subject", "orders", "--delay", "1h", "later"},
		{"consume", "--subject", "orders", "--group", "billing", "--count", "5"},
	} {
		if out, err := ctl(args...); err != nil {
			t.Fatalf("qmqctl %v: %v\n%s", args, err, out)
		}
	}
	// A transfer of leadership to a node that is not a voter: INVALID,
	// counted in qmq_request_errors_total.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	out, err := proctest.Run(ctx, qmqctl, []string{"--server", brokerListen, "broker-group", "transfer-leader", "--broker-group", "g1", "--to", "nosuch"}, env)
	cancel()
	if err == nil || !strings.Contains(out, "INVALID") {
		t.Fatalf("transfer-leader to a node that does not exist: %v: %s; want INVALID", err, out)
	}

	// Prometheus, scraping both nodes every second, the rules' for: cut.
	rulesText, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), forLine.ReplaceAll(rulesText, []byte("${1}1s")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [rules.yaml]
scrape_configs:
- job_name: qmq-meta
  scheme: https
  tls_config: {ca_file: %q}
  static_configs: [{targets: [%q]}]
- job_name: qmq-broker
  scheme: https
  tls_config: {ca_file: %q}
  static_configs: [{targets: [%q]}]
`, filepath.Join(certs, "ca.pem"), metaHTTP, filepath.Join(certs, "ca.pem"), brokerHTTP)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	promAddr := freeAddr(t, promIP)
	base := "http://" + promAddr
	prom := &proctest.Proc{Name: "prometheus", Path: promBin, Env: env, Log: filepath.Join(dir, "prometheus.log"), Args: []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
		"--web.listen-address=" + promAddr}}
	prom.Start(t)
	proctest.Poll(t, 30*time.Second, "both targets up", func() error {
		var tg struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := api(base, "/api/v1/targets", nil, &tg); err != nil {
			return fmt.Errorf("%v; log:\n%s", err, prom.Tail())
		}
		up := 0
		for _, a := range tg.ActiveTargets {
			if a.Health == "up" {
				up++
			}
		}
		if up != 2 {
			return fmt.Errorf("%d of 2 targets up: %+v", up, tg.ActiveTargets)
		}
		return nil
	})

	// Every metric the rules and the dashboard name is served.
	var exprs []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			exprs = append(exprs, rule.Expr)
		}
	}
	names := metricNames(append(dashboardExprs(t), exprs...))
	proctest.Poll(t, 20*time.Second, "every metric of the rules and the dashboard served", func() error {
		var served []string
		if err := api(base, "/api/v1/label/__name__/values", nil, &served); err != nil {
			return err
		}
		var missing []string
		for _, n := range names {
			if !slices.Contains(served, n) && !slices.Contains(served, n+"_bucket") {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not served: %v", missing)
		}
		return nil
	})

	// Every alert and dashboard expression evaluates, and every
	// dashboard query has data.
	for _, e := range exprs {
		var res struct {
			Result []json.RawMessage `json:"result"`
		}
		if err := api(base, "/api/v1/query", url.Values{"query": {e}}, &res); err != nil {
			t.Errorf("alert expression %q: %v", e, err)
		}
	}
	for _, e := range dashboardExprs(t) {
		proctest.Poll(t, 20*time.Second, "dashboard query "+e, func() error {
			var res struct {
				Result []json.RawMessage `json:"result"`
			}
			if err := api(base, "/api/v1/query", url.Values{"query": {e}}, &res); err != nil {
				return err
			}
			if len(res.Result) == 0 {
				return fmt.Errorf("no data")
			}
			return nil
		})
	}
	var alerts struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := api(base, "/api/v1/alerts", nil, &alerts); err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts.Alerts {
		if a.Labels["alertname"] == "QMQBrokerGroupLeaderless" {
			t.Fatalf("QMQBrokerGroupLeaderless is %s while the group has its leader: %v", a.State, a.Labels)
		}
	}

	// The broker group's only node stopped: the metaserver marks it
	// unavailable after --group-timeout, and the alert fires.
	broker.Signal(t, syscall.SIGKILL)
	broker.Wait(t, 10*time.Second)
	proctest.Poll(t, 30*time.Second, "QMQBrokerGroupLeaderless firing for g1", func() error {
		if err := api(base, "/api/v1/alerts", nil, &alerts); err != nil {
			return err
		}
		for _, a := range alerts.Alerts {
			if a.Labels["alertname"] == "QMQBrokerGroupLeaderless" && a.Labels["broker_group"] == "g1" && a.State == "firing" {
				return nil
			}
		}
		return fmt.Errorf("alerts: %+v", alerts.Alerts)
	})
}

package compose

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/deploy/internal/proctest"
)

func load(t *testing.T) *types.Project {
	t.Helper()
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  ".",
		ConfigFiles: []types.ConfigFile{{Filename: "compose.yaml"}},
		Environment: types.Mapping{},
	})
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return p
}

// The services of the file by role: the certificates' maker, the nodes,
// the joins.
type roles struct {
	certs string
	nodes []string // qmqd meta or broker
	joins []string // qmqctl join
}

func roleOf(t *testing.T, p *types.Project) roles {
	var r roles
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range p.Services {
			if !yield(n) {
				return
			}
		}
	}) {
		s := p.Services[name]
		switch {
		case len(s.Entrypoint) == 0 && len(s.Command) > 0 && (s.Command[0] == "meta" || s.Command[0] == "broker"):
			r.nodes = append(r.nodes, name)
		case slices.Equal(s.Entrypoint, []string{"qmqctl"}) && slices.Contains(s.Command, "join"):
			r.joins = append(r.joins, name)
		case slices.Equal(s.Entrypoint, []string{"qmqctl"}) && len(s.Command) > 1 && s.Command[0] == "tls":
			if r.certs != "" {
				t.Fatalf("two services make certificates: %s, %s", r.certs, name)
			}
			r.certs = name
		default:
			t.Fatalf("service %s: neither a node, a join nor the certificates", name)
		}
	}
	return r
}

// flag is the value of a flag given as --flag VALUE in args.
func flag(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func TestComposeFile(t *testing.T) {
	p := load(t)
	r := roleOf(t, p)
	if len(r.nodes) != 9 || len(r.joins) != 6 || r.certs == "" {
		t.Fatalf("%d nodes, %d joins, certificates by %q: want 9, 6 and one service", len(r.nodes), len(r.joins), r.certs)
	}
	// Every service runs the image, which Compose can build from the
	// repository's Dockerfile when it is not loaded.
	for name, s := range p.Services {
		if s.Image != "qmq:devel" || s.Build == nil {
			t.Errorf("%s: image %q, build %v: want qmq:devel, built from deploy/Dockerfile", name, s.Image, s.Build)
			continue
		}
		if df := must(filepath.Abs(filepath.Join(s.Build.Context, s.Build.Dockerfile))); df != must(filepath.Abs("../Dockerfile")) {
			t.Errorf("%s: builds %s, want deploy/Dockerfile", name, df)
		}
	}
	nw := p.Networks["qmq"]
	if nw.Ipam.Config == nil || len(nw.Ipam.Config) != 1 {
		t.Fatal("the network qmq: want one subnet")
	}
	subnet := netip.MustParsePrefix(nw.Ipam.Config[0].Subnet)
	certNames := flag(p.Services[r.certs].Command, "--node")
	boot := map[string]int{}
	byID := map[string]types.ServiceConfig{}
	for _, name := range r.nodes {
		s := p.Services[name]
		ip := s.Networks["qmq"].Ipv4Address
		if a, err := netip.ParseAddr(ip); err != nil || !subnet.Contains(a) {
			t.Errorf("%s: address %q is not in %s", name, ip, subnet)
		}
		args := []string(s.Command)
		for _, f := range []string{"--listen", "--raft", "--http"} {
			if h, _, _ := strings.Cut(flag(args, f), ":"); h != ip {
				t.Errorf("%s: %s %s is not on its address %s", name, f, flag(args, f), ip)
			}
		}
		if !strings.Contains(certNames, ip+",") {
			t.Errorf("%s: the node certificate (%s) does not name %s", name, certNames, ip)
		}
		if flag(args, "--id") != name {
			t.Errorf("%s: --id %s, want the service's name", name, flag(args, "--id"))
		}
		group := "meta"
		if args[0] == "broker" {
			group = flag(args, "--broker-group")
		}
		if slices.Contains(args, "--bootstrap") {
			boot[group]++
		}
		if s.Image != "qmq:devel" || s.Restart != "on-failure" || s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) < 60*time.Second {
			t.Errorf("%s: image %s, restart %s, stop_grace_period %v: want qmq:devel, on-failure, at least 60s", name, s.Image, s.Restart, s.StopGracePeriod)
		}
		if u := s.Ulimits["nofile"]; u == nil || u.Soft < 65536 {
			t.Errorf("%s: want ulimit nofile 65536, as the systemd units", name)
		}
		if d, ok := s.DependsOn[r.certs]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s: want it to wait for %s to complete", name, r.certs)
		}
		if s.Environment["QMQ_SERVER"] == nil || *s.Environment["QMQ_SERVER"] != flag(args, "--listen") {
			t.Errorf("%s: QMQ_SERVER (docker compose exec %s qmqctl …) is not its --listen", name, name)
		}
		byID[name] = s
	}
	for g, n := range boot {
		if n != 1 {
			t.Errorf("group %s: %d nodes with --bootstrap, want 1", g, n)
		}
	}
	joined := map[string]bool{}
	for _, name := range r.joins {
		args := []string(p.Services[name].Command)
		id := flag(args, "--id")
		node, ok := byID[id]
		if !ok || slices.Contains([]string(node.Command), "--bootstrap") {
			t.Errorf("%s joins %q: want a node that does not bootstrap", name, id)
			continue
		}
		joined[id] = true
		na := []string(node.Command)
		if flag(args, "--raft") != flag(na, "--raft") || flag(args, "--addr") != flag(na, "--listen") {
			t.Errorf("%s: --raft %s --addr %s, want %s's %s and %s", name, flag(args, "--raft"), flag(args, "--addr"), id, flag(na, "--raft"), flag(na, "--listen"))
		}
		if p.Services[name].Restart != "on-failure" {
			t.Errorf("%s: want restart on-failure (a join is retried until the group's leader answers)", name)
		}
	}
	for _, name := range r.nodes {
		if !slices.Contains([]string(byID[name].Command), "--bootstrap") && !joined[name] {
			t.Errorf("nothing joins %s", name)
		}
	}
	// The console and /metrics of a metaserver and a broker, on the host.
	published := map[uint32]bool{}
	for _, name := range r.nodes {
		for _, pc := range byID[name].Ports {
			if pc.HostIP == "127.0.0.1" {
				published[pc.Target] = true
			}
		}
	}
	if !published[6281] || !published[6280] {
		t.Errorf("published on 127.0.0.1: %v; want a metaserver's 6281 and a broker's 6280", published)
	}
}

var composeIP = regexp.MustCompile(`\b172\.28\.0\.(\d+)\b`)

// TestComposeCluster runs the services as Compose would (the certificates,
// then the nodes, then the joins, retried), each a process with its
// command and environment, 172.28.0.N moved to 127.0.2.N and each named
// volume to a directory, and checks that the cluster forms and serves, that
// a container killed and started again comes back ready, and that g1's
// leader stopped as docker compose stop stops it costs no send.
func TestComposeCluster(t *testing.T) {
	p := load(t)
	r := roleOf(t, p)
	dir := t.TempDir()
	// localize moves an argument or a variable of service s.
	localize := func(s types.ServiceConfig, v string) string {
		v = composeIP.ReplaceAllString(v, "127.0.2.$1")
		for _, vol := range s.Volumes {
			if vol.Type == types.VolumeTypeVolume && strings.HasPrefix(v, vol.Target) {
				v = filepath.Join(dir, vol.Source) + strings.TrimPrefix(v, vol.Target)
			}
		}
		return v
	}
	cmdOf := func(name string) (path string, args, env []string) {
		s := p.Services[name]
		path = proctest.Bin(t, "qmqd") // the image's entrypoint
		if len(s.Entrypoint) > 0 {
			path = proctest.Bin(t, s.Entrypoint[0])
		}
		for _, a := range s.Command {
			args = append(args, localize(s, a))
		}
		for k, v := range s.Environment {
			if v != nil {
				env = append(env, k+"="+localize(s, *v))
			}
		}
		return path, args, env
	}
	// The named volumes exist before their containers, as Docker makes
	// them: a copy of the image's /var/lib/qmq, the user's, mode 0750.
	for name := range p.Volumes {
		if err := os.Mkdir(filepath.Join(dir, name), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(40 * time.Second)
	path, args, env := cmdOf(r.certs)
	proctest.RunUntilOK(t, r.certs, path, args, env, deadline)
	https := map[string]string{}
	procs := map[string]*proctest.Proc{}
	for _, name := range r.nodes {
		path, args, env := cmdOf(name)
		procs[name] = &proctest.Proc{Name: name, Path: path, Args: args, Env: env, Log: filepath.Join(dir, name+".log")}
		procs[name].Start(t)
		https[name] = "https://" + flag(args, "--http")
	}
	joins := func(deadline time.Time) {
		var wg sync.WaitGroup
		for _, name := range r.joins {
			path, args, env := cmdOf(name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				proctest.RunUntilOK(t, name, path, args, env, deadline)
			}()
		}
		wg.Wait()
	}
	joins(deadline)
	ready := func() {
		t.Helper()
		for _, name := range r.nodes {
			proctest.Poll(t, 30*time.Second, name+" ready", func() error { return proctest.Get(https[name] + "/readyz") })
		}
	}
	ready()
	// docker compose up again: the certificates renewed under the running
	// nodes (with the same CA), the joins run again, and nothing changes.
	path, args, env = cmdOf(r.certs)
	proctest.RunUntilOK(t, r.certs, path, args, env, time.Now().Add(10*time.Second))
	joins(time.Now().Add(20 * time.Second))
	ready()
	_, _, env = cmdOf(r.nodes[0])
	ctl := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		out, err := proctest.Run(ctx, proctest.Bin(t, "qmqctl"), args, env)
		if err != nil {
			return fmt.Errorf("qmqctl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	proctest.Poll(t, 30*time.Second, "status --check", func() error { return ctl("status", "--check") })
	if err := ctl("send", "--subject", "orders", "--count", "3", "hello"); err != nil {
		t.Fatal(err)
	}
	if err := ctl("consume", "--subject", "orders", "--group", "billing", "--start", "earliest", "--count", "3", "--timeout", "20s"); err != nil {
		t.Fatal(err)
	}
	// The console and /metrics, as the host reaches them without a certificate.
	for _, name := range r.nodes {
		for _, pc := range p.Services[name].Ports {
			if pc.HostIP != "127.0.0.1" {
				continue
			}
			if strings.HasSuffix(https[name], fmt.Sprint(":", pc.Target)) {
				for _, path := range []string{"/metrics", "/"} {
					if err := proctest.Get(https[name] + path); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
	}

	// A container killed and started again (restart: on-failure) with its
	// volume comes back ready.
	victim := procs["g1b"]
	victim.Signal(t, syscall.SIGKILL)
	victim.Wait(t, 10*time.Second)
	victim.Start(t)
	ready()

	// docker compose stop of g1's leader (SIGTERM, then stop_grace_period)
	// under a steady stream of sends: it hands leadership over first, and
	// costs no send.
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	var metas []string
	for _, name := range r.nodes {
		if a := []string(p.Services[name].Command); a[0] == "meta" {
			metas = append(metas, localize(p.Services[name], flag(a, "--listen")))
		}
	}
	prod, err := qmq.NewProducer(strings.Join(metas, ","), qmq.WithTLS(qmq.TLSFiles{CA: vars["QMQ_TLS_CA"], Cert: vars["QMQ_TLS_CERT"], Key: vars["QMQ_TLS_KEY"]}))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	snd := proctest.StartSender(t, prod, "steady")
	snd.WaitSent(t, 20)
	var leader string
	proctest.Poll(t, 10*time.Second, "g1's leader", func() error {
		resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: proctest.InsecureTransport()}).Get(https["g1a"] + "/status")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var st struct{ Leader string }
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return err
		}
		if procs[st.Leader] == nil {
			return fmt.Errorf("g1a names no leader (%q)", st.Leader)
		}
		leader = st.Leader
		return nil
	})
	lp := procs[leader]
	lp.Signal(t, syscall.SIGTERM)
	if err := lp.Wait(t, time.Duration(*p.Services[leader].StopGracePeriod)); err != nil {
		t.Errorf("%s exited with %v on SIGTERM, want 0; its log:\n%s", leader, err, lp.Tail())
	}
	if log, _ := os.ReadFile(lp.Log); !strings.Contains(string(log), "leadership handed over before stopping") {
		t.Errorf("%s did not hand leadership over on SIGTERM; its log:\n%s", leader, lp.Tail())
	}
	snd.WaitSent(t, 50)
	lp.Start(t)
	ready()
	snd.WaitSent(t, 20)
	snd.Check(t)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

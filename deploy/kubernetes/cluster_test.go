package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/deploy/internal/proctest"
)

// pod is one pod of a StatefulSet, run as a process: its qmqd container
// with the arguments and environment the kubelet would give it.
type pod struct {
	name  string
	dns   string // its DNS name under its StatefulSet's headless service
	n     int    // its number in the cluster, from 1: the last byte of its IPs
	gen   int    // its generation: the third byte of its IP
	podIP string // the loopback address standing for the pod's IP, which changes when it is deleted
	c     *corev1.Container
	env   []string          // the container's environment, as the kubelet makes it
	vars  map[string]string // the same, by name
	proc  *proctest.Proc
	http  string // the URL of its HTTP port, on the pod's IP (the probes')
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand expands $(VAR) as the kubelet does in args and env values: a
// defined variable is replaced, an undefined reference kept, $$ is $.
func expand(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// cluster is the manifests' pods and Job, with what a cluster would give
// them moved to the test: the pods' IPs to loopback addresses, which the
// pods' DNS names resolve to through the hosts file (TestMain), the
// volumes to directories.
type cluster struct {
	t      *testing.T
	m      *manifests
	dir    string
	tlsDir string
	pods   map[string]*pod
	order  []string
}

func newCluster(t *testing.T) *cluster {
	m := load(t)
	c := &cluster{t: t, m: m, dir: t.TempDir(), pods: map[string]*pod{}}
	c.tlsDir = filepath.Join(c.dir, "tls")
	var names []string
	for _, s := range m.statefulSets {
		for i := range *s.Spec.Replicas {
			name := fmt.Sprintf("%s-%d", s.Name, i)
			p := &pod{name: name, dns: name + "." + s.Spec.ServiceName + "." + m.namespace + ".svc.cluster.local",
				n: len(c.order) + 1, c: &s.Spec.Template.Spec.Containers[0]}
			c.pods[name] = p
			c.order = append(c.order, name)
		}
		if n := "*." + s.Spec.ServiceName + "." + m.namespace + ".svc.cluster.local"; !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	// The Secret qmq-tls: one node certificate valid for every pod's name,
	// a wildcard under each headless service (the probes, and the test's
	// reads of /status, dial the pods' IPs without verifying them).
	if out, err := proctest.Run(context.Background(), proctest.Bin(t, "qmqctl"),
		[]string{"tls", "init", "--dir", c.tlsDir, "--node", "node=" + strings.Join(names, ",")}, nil); err != nil {
		t.Fatalf("qmqctl tls init: %v: %s", err, out)
	}
	return c
}

// start starts pods' qmqd, each on a new pod IP of generation gen (the
// one it has, to start it again on the same), with the arguments and
// environment the kubelet would give it there, once their DNS names
// resolve to those IPs, as a headless service's records follow its pods.
func (c *cluster) start(gen int, pods ...*pod) {
	c.t.Helper()
	for _, p := range pods {
		p.gen, p.podIP = gen, podIP(p, gen)
	}
	var hosts []string
	for _, name := range c.order {
		if p := c.pods[name]; p.podIP != "" {
			hosts = append(hosts, p.podIP+" "+p.dns)
		}
	}
	writeHosts(c.t, hosts)
	for _, p := range pods {
		c.run(p)
	}
}

// run starts pod p's qmqd on its pod IP.
func (c *cluster) run(p *pod) {
	t := c.t
	t.Helper()
	podIP := p.podIP
	p.vars = c.environment(p.c, c.m.configMaps["qmq-env"], map[string]string{"metadata.name": p.name, "metadata.namespace": c.m.namespace, "status.podIP": podIP})
	p.env = nil
	for k, v := range p.vars {
		p.env = append(p.env, k+"="+v)
	}
	args := make([]string, len(p.c.Args))
	for j, a := range p.c.Args {
		// 0.0.0.0 in a pod is the pod's addresses, in the test its IP's.
		args[j] = strings.ReplaceAll(c.localize(p.name, expand(a, p.vars)), "0.0.0.0:", podIP+":")
	}
	for _, cp := range p.c.Ports {
		if cp.Name == "http" {
			p.http = fmt.Sprintf("https://%s:%d", podIP, cp.ContainerPort)
		}
	}
	p.proc = &proctest.Proc{Name: p.name, Path: proctest.Bin(t, "qmqd"), Args: args, Env: p.env, Log: filepath.Join(c.dir, p.name+".log")}
	p.proc.Start(t)
}

// podIP is the loopback address standing for the IP of pod number N:
// 127.0.G.N, G the pod's generation (1 for its first start, 3 once
// deleted, 4 after the whole cluster's restart: compose's test uses
// 127.0.2.N), so that every pod has its own address and the same ports.
func podIP(p *pod, generation int) string {
	return fmt.Sprintf("127.0.%d.%d", generation, p.n)
}

// environment is a container's environment as the kubelet makes it: the
// ConfigMap's variables, then env in order, each value expanded with what
// came before it, fieldRefs from the downward API's fields.
func (c *cluster) environment(ct *corev1.Container, cm *corev1.ConfigMap, fields map[string]string) map[string]string {
	vars := map[string]string{}
	for _, ef := range ct.EnvFrom {
		if ef.ConfigMapRef == nil || ef.ConfigMapRef.Name != cm.Name {
			c.t.Fatalf("envFrom %+v: the test knows the ConfigMap %s only", ef, cm.Name)
		}
		for k, v := range cm.Data {
			vars[k] = v
		}
	}
	for _, e := range ct.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				c.t.Fatalf("env %s: the field %s is not one the test gives", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			vars[e.Name] = v
		case e.ValueFrom != nil:
			c.t.Fatalf("env %s: a source the test does not give", e.Name)
		default:
			vars[e.Name] = expand(e.Value, vars)
		}
	}
	for k, v := range vars {
		vars[k] = c.localizeEnv(v)
	}
	return vars
}

// localize moves an argument of pod's container: the volumes' mount paths
// to the test's directories. Names stay names: they resolve through the
// hosts file.
func (c *cluster) localize(pod, s string) string {
	s = strings.ReplaceAll(s, "/var/lib/qmq", filepath.Join(c.dir, pod))
	return c.localizeEnv(s)
}

func (c *cluster) localizeEnv(s string) string {
	return strings.ReplaceAll(s, "/etc/qmq/tls", c.tlsDir)
}

// join runs the Job's containers as the kubelet would, at once and each
// restarted until it succeeds.
func (c *cluster) join(deadline time.Time) {
	j := c.m.jobs[0]
	var wg sync.WaitGroup
	for _, ct := range j.Spec.Template.Spec.Containers {
		vars := c.environment(&ct, c.m.configMaps["qmq-env"], map[string]string{"metadata.namespace": c.m.namespace})
		var env, args []string
		for k, v := range vars {
			env = append(env, k+"="+v)
		}
		for _, a := range ct.Args {
			args = append(args, c.localizeEnv(expand(a, vars)))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			proctest.RunUntilOK(c.t, ct.Name, proctest.Bin(c.t, ct.Command[0]), args, env, deadline)
		}()
	}
	wg.Wait()
}

// ready waits until every pod's /readyz answers 200 and qmqctl status
// --check, run as in a pod, finds the whole cluster led.
func (c *cluster) ready(d time.Duration) {
	c.t.Helper()
	for _, name := range c.order {
		p := c.pods[name]
		proctest.Poll(c.t, d, name+" ready", func() error {
			if err := proctest.Get(p.http + "/readyz"); err != nil {
				return fmt.Errorf("%w; its log ends:\n%s", err, tail(p.proc.Tail(), 600))
			}
			return nil
		})
	}
	p := c.pods[c.order[0]]
	proctest.Poll(c.t, d, "qmqctl status --check", func() error {
		out, err := proctest.Run(context.Background(), proctest.Bin(c.t, "qmqctl"), []string{"status", "--check"}, p.env)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// leaderOf is the pod leading group, by the /status of one of its pods.
func (c *cluster) leaderOf(group string) *pod {
	c.t.Helper()
	var leader *pod
	proctest.Poll(c.t, 10*time.Second, "the leader of "+group, func() error {
		for _, name := range c.order {
			p := c.pods[name]
			if groupOf(p.c) != group {
				continue
			}
			var st struct{ Leader string }
			if err := getJSON(p.http+"/status", &st); err != nil {
				continue
			}
			if leader = c.pods[st.Leader]; leader != nil {
				return nil
			}
		}
		return fmt.Errorf("no pod of %s names a leader", group)
	})
	return leader
}

func getJSON(url string, v any) error {
	cl := &http.Client{Timeout: 2 * time.Second, Transport: proctest.InsecureTransport()}
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

func (c *cluster) ctl(p *pod, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	return proctest.Run(ctx, proctest.Bin(c.t, "qmqctl"), args, p.env)
}

// TestCluster runs the StatefulSets' pods and the join Job as processes and
// checks that the cluster forms and serves, that a pod killed and started
// again with its identity and data comes back ready, and that a pod
// stopped as the kubelet stops it (SIGTERM: it hands leadership over) under a
// steady stream of sends (g1's leader, then the metaserver group's) costs
// no send, and that the whole cluster killed at once and started on new pod
// IPs comes back.
func TestCluster(t *testing.T) {
	c := newCluster(t)
	var all []*pod
	for _, name := range c.order {
		all = append(all, c.pods[name])
	}
	c.start(1, all...) // podManagementPolicy Parallel: all at once
	c.join(time.Now().Add(40 * time.Second))
	c.ready(30 * time.Second)

	seed := c.pods[c.order[0]]
	if out, err := c.ctl(seed, "send", "--subject", "orders", "--count", "3", "hello"); err != nil {
		t.Fatalf("send: %v: %s", err, out)
	}
	if out, err := c.ctl(seed, "consume", "--subject", "orders", "--group", "billing", "--start", "earliest", "--count", "3", "--timeout", "20s"); err != nil {
		t.Fatalf("consume: %v: %s", err, out)
	}

	// A pod "deleted": killed, and started again with its name and volume
	// but a new pod IP, as a pod rescheduled is. Its group knows it by its
	// DNS name, which now resolves to the new IP, so it rejoins with nothing
	// run.
	killed := c.pods["qmq-g1-0"]
	killed.proc.Signal(t, syscall.SIGKILL)
	killed.proc.Wait(t, 10*time.Second)
	c.start(3, killed)
	c.ready(30 * time.Second)
	// The Job run again (a new pod added, or by hand): every join succeeds
	// and changes nothing.
	c.join(time.Now().Add(30 * time.Second))
	c.ready(10 * time.Second)

	// A steady stream of sends while g1's leader is stopped as the kubelet
	// stops a pod, and started again.
	tlsOpt := qmq.WithTLS(qmq.TLSFiles{CA: seed.vars["QMQ_TLS_CA"], Cert: seed.vars["QMQ_TLS_CERT"], Key: seed.vars["QMQ_TLS_KEY"]})
	var servers []string
	for _, name := range c.order {
		if p := c.pods[name]; groupOf(p.c) == "meta" {
			servers = append(servers, p.vars["QMQ_SERVER"])
		}
	}
	prod, err := qmq.NewProducer(strings.Join(servers, ","), tlsOpt)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	snd := proctest.StartSender(t, prod, "steady")
	snd.WaitSent(t, 20)
	// g1's leader, then the metaserver group's.
	for _, group := range []string{"g1", "meta"} {
		leader := c.leaderOf(group)
		leader.proc.Signal(t, syscall.SIGTERM)
		grace := time.Duration(*c.setOf(leader).Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
		if err := leader.proc.Wait(t, grace); err != nil {
			t.Errorf("%s exited with %v on SIGTERM, want 0; its log:\n%s", leader.name, err, leader.proc.Tail())
		}
		if log, _ := os.ReadFile(leader.proc.Log); !strings.Contains(string(log), "leadership handed over before stopping") {
			t.Errorf("%s did not hand leadership of %s over on SIGTERM; its log:\n%s", leader.name, group, leader.proc.Tail())
		}
		snd.WaitSent(t, 50) // sends go on while the pod is away
		c.start(leader.gen, leader)
		c.ready(30 * time.Second)
		snd.WaitSent(t, 20)
	}
	snd.Check(t)
	t.Logf("%d sends, across the SIGTERM of g1's and the metaserver group's leaders", snd.Sent())

	// Every pod at once, as in an outage of the whole cluster: killed, and
	// started again on new pod IPs. Every recorded address is a name, so
	// the groups find each other again at the new IPs with nothing run.
	for _, p := range all {
		p.proc.Signal(t, syscall.SIGKILL)
	}
	for _, p := range all {
		p.proc.Wait(t, 10*time.Second)
	}
	c.start(4, all...)
	c.ready(40 * time.Second)
	if out, err := c.ctl(seed, "send", "--subject", "orders", "after"); err != nil {
		t.Fatalf("send after the whole cluster's restart: %v: %s", err, out)
	}
}

func (c *cluster) setOf(p *pod) *appsv1.StatefulSet {
	for _, s := range c.m.statefulSets {
		if strings.HasPrefix(p.name, s.Name+"-") && &s.Spec.Template.Spec.Containers[0] == p.c {
			return s
		}
	}
	c.t.Fatalf("no StatefulSet makes %s", p.name)
	return nil
}

package systemd

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/testport"
)

// The units of this directory, the broker's template with the instance
// the tests give it, and the example environment file each instance reads.
const (
	metaUnit   = "qmq-meta.service"
	brokerUnit = "qmq-broker@.service"
	instance   = "g1a"
)

var exampleEnv = map[string]string{
	"/etc/qmq/qmq.env":                     "qmq.env",
	"/etc/qmq/meta.env":                    "meta.env",
	"/etc/qmq/broker-" + instance + ".env": "broker.env",
}

// Descriptors a node keeps besides --max-open-files and --max-conns
// (server/filelimit.go: raft-wal's 37 and 256 for peers, snapshots, HTTP),
// and the defaults of those flags.
const (
	nodeFiles           = 293
	defaultMaxOpenFiles = 1024
	defaultMaxConns     = 8192
)

// unit is a unit file's [Service] section: every value of each key, in
// order, with the instance's specifiers resolved.
type unit map[string][]string

func (u unit) one(t *testing.T, key string) string {
	t.Helper()
	if len(u[key]) != 1 {
		t.Fatalf("%s= given %d times, want once", key, len(u[key]))
	}
	return u[key][0]
}

// readUnit reads the [Service] section of the unit file name as instance
// inst ("" for a unit that is not a template), with the host paths of
// paths replaced by the test's.
func readUnit(t *testing.T, name, inst string, paths *strings.Replacer) unit {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	text := specifiers(t, name, string(data), inst)
	if paths != nil {
		text = paths.Replace(text)
	}
	u := unit{}
	section := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		if strings.HasPrefix(l, "[") {
			section = l
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("%s: %q: not KEY=VALUE", name, l)
		}
		if section == "[Service]" {
			u[k] = append(u[k], v)
		}
	}
	return u
}

// specifiers resolves the unit specifiers text uses: %i, the instance, and
// %%; any other fails t, since the test would not run what systemd does.
func specifiers(t *testing.T, name, text, inst string) string {
	t.Helper()
	return regexp.MustCompile(`%.`).ReplaceAllStringFunc(text, func(s string) string {
		switch s {
		case "%%":
			return "%"
		case "%i":
			if inst == "" {
				t.Fatalf("%s: %%i in a unit that is not a template", name)
			}
			return inst
		}
		t.Fatalf("%s: specifier %s: the test resolves only %%i and %%%%", name, s)
		return ""
	})
}

// readEnvFile reads a systemd environment file: KEY=VALUE lines, comments
// (# or ;) and blank lines skipped, a value's enclosing quotes removed.
func readEnvFile(t *testing.T, name string, paths *strings.Replacer) map[string]string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(paths.Replace(string(data)), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok || !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(k) {
			t.Fatalf("%s: %q: not KEY=VALUE", name, l)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env[k] = v
	}
	return env
}

var (
	braced = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	bare   = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`)
)

// execArgs expands a unit's ExecStart command line with env as systemd
// does: words split at spaces; a ${VAR} replaced by VAR's value, which
// stays within its word (an empty one if unset); a word that is $VAR alone
// replaced by VAR's value split at spaces (no word if empty). It fails t
// on what systemd would read otherwise (quotes, prefixes, escapes) or on
// a variable env does not set.
func execArgs(t *testing.T, line string, env map[string]string) []string {
	t.Helper()
	if strings.ContainsAny(line, `"'\`) || strings.ContainsAny(line[:1], "-@+!:") {
		t.Fatalf("ExecStart=%s: quotes, escapes and prefixes are not what this test expands", line)
	}
	lookup := func(k string) string {
		v, ok := env[k]
		if !ok {
			t.Errorf("ExecStart=%s: $%s: no environment file sets it", line, k)
		}
		return v
	}
	var args []string
	for _, w := range strings.Fields(line) {
		if m := bare.FindStringSubmatch(w); m != nil {
			args = append(args, strings.Fields(lookup(m[1]))...)
			continue
		}
		w = braced.ReplaceAllStringFunc(w, func(s string) string { return lookup(braced.FindStringSubmatch(s)[1]) })
		if strings.Contains(w, "$") {
			t.Fatalf("ExecStart=%s: %q: a $ this test does not expand", line, w)
		}
		args = append(args, w)
	}
	return args
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v %q", err, out)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// buildBinaries builds qmqd and qmqctl into dir.
func buildBinaries(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cli/qmqd", "./cli/qmqctl")
	cmd.Dir = moduleRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// hostPaths maps the paths the units and the environment files name on a
// host to the test's directories under root.
func hostPaths(root string) *strings.Replacer {
	return strings.NewReplacer(
		"/usr/local/bin/", filepath.Join(root, "bin")+"/",
		"/var/lib/qmq", filepath.Join(root, "var-lib-qmq"),
		"/etc/qmq/", filepath.Join(root, "etc-qmq")+"/",
	)
}

// systemdAnalyze returns the path of systemd-analyze, which `make systemd`
// installs, failing t if it is missing.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is missing: `make systemd` installs it (Debian's systemd package), and `make test` runs it first")
	}
	return p
}

// TestVerify: systemd-analyze verify finds nothing to say of the units,
// their ExecStart pointing at built binaries (verify checks the command
// exists), and systemd-analyze security rates their sandbox OK.
func TestVerify(t *testing.T) {
	analyze := systemdAnalyze(t)
	root := t.TempDir()
	buildBinaries(t, filepath.Join(root, "bin"))
	units := filepath.Join(root, "units")
	if err := os.Mkdir(units, 0o755); err != nil {
		t.Fatal(err)
	}
	only := strings.NewReplacer("/usr/local/bin/", filepath.Join(root, "bin")+"/")
	for _, name := range []string{metaUnit, brokerUnit} {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "ExecStart=/usr/local/bin/qmqd ") {
			t.Fatalf("%s: ExecStart does not run /usr/local/bin/qmqd", name)
		}
		if err := os.WriteFile(filepath.Join(units, name), []byte(only.Replace(string(data))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	broker := filepath.Join(units, strings.Replace(brokerUnit, "@", "@"+instance, 1))
	for _, u := range []string{filepath.Join(units, metaUnit), broker} {
		out, err := exec.Command(analyze, "verify", u).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(u), err, out)
		}
		out, err = exec.Command(analyze, "security", "--offline=yes", u).CombinedOutput()
		m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\S+)`).FindSubmatch(out)
		if err != nil || m == nil {
			t.Errorf("systemd-analyze security --offline=yes %s: %v\n%s", filepath.Base(u), err, out)
			continue
		}
		if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 2 {
			t.Errorf("systemd-analyze security %s: exposure %s %s, want at most 2.0 (OK)\n%s", filepath.Base(u), m[1], m[2], out)
		}
	}
}

// flagValue returns the int value of --name in args, or def.
func flagValue(t *testing.T, args []string, name string, def int) int {
	t.Helper()
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("--%s %q", name, v)
			}
			return n
		}
		if a == "--"+name && i+1 < len(args) {
			n, err := strconv.Atoi(args[i+1])
			if err != nil {
				t.Fatalf("--%s %q", name, args[i+1])
			}
			return n
		}
	}
	return def
}

// node is a unit's command line as the test runs it.
type node struct {
	name     string
	unit     unit
	args     []string
	env      []string
	dir      string
	nofile   uint64 // LimitNOFILE
	need     int    // the descriptors its command line needs
	stopWait time.Duration
	stop     syscall.Signal
}

// loadNode reads the unit name (as instance inst) and the example
// environment files it names, with the host paths replaced by the test's
// under root, the variables of set replaced and --bootstrap added to
// QMQ_ARGS (the node is its group's first).
func loadNode(t *testing.T, name, inst, root string, set map[string]string) node {
	t.Helper()
	paths := hostPaths(root)
	u := readUnit(t, name, inst, nil)
	env := map[string]string{}
	for _, f := range u["EnvironmentFile"] {
		example, ok := exampleEnv[f]
		if !ok {
			t.Fatalf("%s: EnvironmentFile=%s: no example of it in deploy/systemd", name, f)
		}
		for k, v := range readEnvFile(t, example, paths) {
			env[k] = v
		}
	}
	for k, v := range set {
		if _, ok := env[k]; !ok {
			t.Fatalf("%s: its environment files do not set %s", name, k)
		}
		env[k] = v
	}
	// The group's first node, as the example's comment says.
	if _, ok := env["QMQ_ARGS"]; !ok {
		t.Fatalf("%s: its environment files do not set QMQ_ARGS", name)
	}
	env["QMQ_ARGS"] += " --bootstrap"
	for _, e := range u["Environment"] {
		for _, kv := range strings.Fields(e) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	u = readUnit(t, name, inst, paths)
	n := node{name: name, unit: u, args: execArgs(t, u.one(t, "ExecStart"), env), dir: u.one(t, "WorkingDirectory")}
	// systemd's environment for a system service, and the files'.
	n.env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	for k, v := range env {
		n.env = append(n.env, k+"="+v)
	}
	var err error
	if n.nofile, err = strconv.ParseUint(u.one(t, "LimitNOFILE"), 10, 64); err != nil {
		t.Fatalf("%s: LimitNOFILE=%s: want one number (soft and hard alike)", name, u.one(t, "LimitNOFILE"))
	}
	n.need = nodeFiles + flagValue(t, n.args, "max-conns", defaultMaxConns)
	if n.args[1] == "broker" {
		n.need += flagValue(t, n.args, "max-open-files", defaultMaxOpenFiles)
	}
	sec, err := strconv.Atoi(u.one(t, "TimeoutStopSec"))
	if err != nil {
		t.Fatalf("%s: TimeoutStopSec=%s: want seconds", name, u.one(t, "TimeoutStopSec"))
	}
	if sec <= 0 {
		t.Fatalf("%s: TimeoutStopSec=%d: want a bound (0 waits for ever)", name, sec)
	}
	n.stopWait = time.Duration(sec) * time.Second
	if s := u.one(t, "KillSignal"); s != "SIGTERM" {
		t.Fatalf("%s: KillSignal=%s: qmqd closes cleanly on SIGTERM (or SIGINT)", name, s)
	}
	n.stop = syscall.SIGTERM
	return n
}

// TestLimitNOFILE: each unit's file limit leaves room for its command
// line's --max-open-files (a broker's), --max-conns and what a node keeps
// besides, so that a node under it never lowers --max-conns.
func TestLimitNOFILE(t *testing.T) {
	root := t.TempDir()
	for _, n := range []node{loadNode(t, metaUnit, "", root, nil), loadNode(t, brokerUnit, instance, root, nil)} {
		if n.nofile < uint64(n.need) {
			t.Errorf("%s: LimitNOFILE=%d, below the %d its command line needs (%q)", n.name, n.nofile, n.need, n.args)
		}
	}
}

// syncBuffer is a process's output, written by os/exec and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// started is a node's process.
type started struct {
	node
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

// start runs n's command line under its file limit, soft and hard, as
// systemd's LimitNOFILE sets them (through util-linux's prlimit, which
// execs the command: the process is qmqd's).
func start(t *testing.T, n node) *started {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatal("prlimit (util-linux) is missing: it gives the nodes the units' LimitNOFILE")
	}
	// LimitNOFILE, or as much of it as the test's hard limit allows (a
	// container's may be lower), if that is still what the command line
	// needs.
	var own syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &own); err != nil {
		t.Fatal(err)
	}
	limit := min(n.nofile, own.Max)
	if limit < n.nofile && limit < uint64(n.need) {
		t.Fatalf("%s: the test's hard file limit %d is below the %d the command line needs: raise it (ulimit -Hn)", n.name, own.Max, n.need)
	}
	if limit < n.nofile {
		t.Logf("%s: running under a file limit of %d, the test's hard limit, not LimitNOFILE=%d", n.name, limit, n.nofile)
	}

	s := &started{node: n, out: &syncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(prlimit, append([]string{fmt.Sprintf("--nofile=%d:%d", limit, limit), "--"}, n.args...)...)
	s.cmd.Env, s.cmd.Dir, s.cmd.Stdout, s.cmd.Stderr = n.env, n.dir, s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("%s: %q: %v", n.name, n.args, err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill() // a test that failed before stopping it
			<-s.exited
		}
		if t.Failed() {
			t.Logf("%s (pid %d) %q:\n%s", n.name, s.cmd.Process.Pid, n.args, s.out.String())
		}
	})
	return s
}

// stopNode sends the process the unit's KillSignal and fails t unless it
// exits 0 within the unit's TimeoutStopSec, as systemd would see a clean stop.
func (s *started) stopNode(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(s.stop); err != nil {
		t.Fatalf("%s: signal %v: %v", s.name, s.stop, err)
	}
	select {
	case <-s.exited:
	case <-time.After(s.stopWait):
		t.Fatalf("%s: still running %v after %v (TimeoutStopSec): systemd would kill it", s.name, s.stopWait, s.stop.String())
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s: exit status %d after %v, want 0 (a clean stop)", s.name, code, s.stop)
	}
}

// TestUnitsStartNodes runs the units' ExecStart command lines as systemd
// would, with the example environment files (TLS files, made here, in the
// directory qmq.env names) and the units' file limit, only the addresses
// moved to loopback ports, the host's paths to the test's and --bootstrap
// added, as on a group's first node: the
// metaserver and the broker come up and form a cluster qmqctl status finds
// healthy, neither lowers --max-conns, and each stops cleanly on SIGTERM.
func TestUnitsStartNodes(t *testing.T) {
	root := t.TempDir()
	paths := hostPaths(root)
	bin := filepath.Join(root, "bin")
	buildBinaries(t, bin)

	// What the tmpfiles.d snippet makes.
	data, err := os.ReadFile("qmq.tmpfiles.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(paths.Replace(string(data)), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		mode, err := strconv.ParseUint(f[2], 8, 32)
		if f[0] != "d" || err != nil {
			t.Fatalf("qmq.tmpfiles.conf: %q: want d PATH MODE USER GROUP -", l)
		}
		if err := os.MkdirAll(f[1], os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}

	// The certificates qmq.env names: a node's valid for 127.0.0.1, the CA,
	// and a client's for qmqctl.
	tlsDir := filepath.Join(root, "etc-qmq", "tls")
	ctl := filepath.Join(bin, "qmqctl")
	if out, err := exec.Command(ctl, "tls", "init", "--dir", tlsDir, "--node", "node=127.0.0.1", "--client", "admin").CombinedOutput(); err != nil {
		t.Fatalf("qmqctl tls init: %v\n%s", err, out)
	}

	metaAddr := testport.Addr(t)
	meta := start(t, loadNode(t, metaUnit, "", root, map[string]string{
		"QMQ_LISTEN": metaAddr, "QMQ_RAFT": testport.Addr(t), "QMQ_HTTP": testport.Addr(t)}))
	broker := start(t, loadNode(t, brokerUnit, instance, root, map[string]string{
		"QMQ_META": metaAddr, "QMQ_LISTEN": testport.Addr(t), "QMQ_RAFT": testport.Addr(t), "QMQ_HTTP": testport.Addr(t)}))

	// The cluster is up when qmqctl status --check, over TLS with the
	// client's certificate, finds the metaserver and the broker group led.
	status := func() (string, error) {
		cmd := exec.Command(ctl, "--tls-ca", filepath.Join(tlsDir, "ca.pem"), "--tls-cert", filepath.Join(tlsDir, "admin.pem"),
			"--tls-key", filepath.Join(tlsDir, "admin-key.pem"), "--server", metaAddr, "status", "--check")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := status()
		if err == nil && regexp.MustCompile(`(?m)^g1\s+g1a\s+Leader\b`).MatchString(out) && regexp.MustCompile(`(?m)^meta\s+m1\s+Leader\b`).MatchString(out) {
			break
		}
		for _, s := range []*started{meta, broker} {
			select {
			case <-s.exited:
				t.Fatalf("%s exited (%v) before the cluster was up", s.name, s.cmd.ProcessState)
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("qmqctl status --check: not up within 60 s: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond) // between polls of qmqctl, a process each
	}
	for _, s := range []*started{meta, broker} {
		if strings.Contains(s.out.String(), "leaves room for fewer client connections") {
			t.Errorf("%s lowered --max-conns under its file limit:\n%s", s.name, s.out.String())
		}
	}
	broker.stopNode(t)
	meta.stopNode(t)
}

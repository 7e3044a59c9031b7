// Command benchcompare measures qmq against NATS JetStream on this
// machine in one sitting: a three-node qmq broker group (quorum fsync)
// and a three-server JetStream cluster (file storage, three replicas,
// sync_interval: always), fresh for every round, the systems alternated
// (qmq then NATS, then NATS then qmq, …). It writes the medians as a
// markdown table between the bench-compare markers of docs/benchmarks.md
// and as a PNG bar chart beside it. `make bench-compare` runs it; see
// docs/benchmarks.md "qmq against NATS JetStream" for what each figure is.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Versions of the NATS programs measured, installed with go install.
const (
	natsServerModule = "github.com/nats-io/nats-server/v2@v2.15.2"
	natsCLIModule    = "github.com/nats-io/natscli/nats@v0.5.0"
)

// options are the command's flags.
type options struct {
	rounds  int
	quick   bool
	only    map[string]bool // workloads to run; empty: all
	out     string          // the markdown file to update ("": print only)
	png     string
	repo    string
	natsBin string // a directory holding nats-server and nats (skips go install)
	keep    bool
	args    []string
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = runAll(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("benchcompare", flag.ContinueOnError)
	o := &options{args: args}
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per system (each on a fresh cluster); the table gives medians")
	fs.BoolVar(&o.quick, "quick", false, "short runs: a smoke check that everything starts and measures, not figures to compare")
	only := fs.String("only", "", "run only these workloads, comma-separated: "+workloadNames())
	fs.StringVar(&o.out, "out", "../../docs/benchmarks.md", "the markdown file whose bench-compare block is replaced (\"\": print only)")
	fs.StringVar(&o.png, "png", "", "the chart (default: bench-compare.png beside --out)")
	fs.StringVar(&o.repo, "repo", "../..", "the qmq repository, whose qmqd and qmqctl are built and measured")
	fs.StringVar(&o.natsBin, "nats-bin", "", "a directory holding nats-server and nats already (default: go install them into a temporary directory)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (data, logs) for a look after the run")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.rounds < 1 || o.rounds > 50 {
		return nil, fmt.Errorf("--rounds %d: within 1..50", o.rounds)
	}
	o.only = map[string]bool{}
	for name := range strings.SplitSeq(*only, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !isWorkload(name) {
			return nil, fmt.Errorf("--only %s: no such workload (%s)", name, workloadNames())
		}
		o.only[name] = true
	}
	if o.png == "" && o.out != "" {
		o.png = filepath.Join(filepath.Dir(o.out), "bench-compare.png")
	}
	return o, nil
}

func workloadNames() string {
	var out []string
	for _, w := range workloads {
		out = append(out, w.name)
	}
	return strings.Join(out, ", ")
}

func isWorkload(name string) bool {
	for _, w := range workloads {
		if w.name == name {
			return true
		}
	}
	return false
}

func (o *options) runs(name string) bool { return len(o.only) == 0 || o.only[name] }

// runAll installs and builds, runs the rounds, and writes the report.
// Every process it started is stopped by PID and every temporary
// directory removed when it returns, whatever happened.
func runAll(ctx context.Context, o *options) error {
	tmp, err := os.MkdirTemp("", "qmq-bench-compare-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "keeping %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	ps := newProcs()
	defer ps.stopAll()
	logf, err := os.Create(filepath.Join(tmp, "clients.log"))
	if err != nil {
		return err
	}
	defer logf.Close()

	bin := filepath.Join(tmp, "bin")
	natsBin := o.natsBin
	if natsBin == "" {
		gobin, err := os.MkdirTemp("", "qmq-bench-compare-gobin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(gobin)
		natsBin = gobin
		for _, m := range []string{natsServerModule, natsCLIModule} { // one module a command: go install takes one version at a time
			fmt.Fprintf(os.Stderr, "go install %s\n", m)
			if err := goCmd(ctx, "", []string{"GOBIN=" + gobin}, "install", m); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(os.Stderr, "go build qmqd qmqctl\n")
	if err := goCmd(ctx, o.repo, nil, "build", "-o", bin+"/", "./cli/qmqd", "./cli/qmqctl"); err != nil {
		return err
	}
	commit, _ := gitOutput(o.repo, "rev-parse", "--short", "HEAD")
	if dirty, _ := gitOutput(o.repo, "status", "--porcelain", "--untracked-files=no"); dirty != "" {
		commit += " (with uncommitted changes)"
	}

	q := &qmqSystem{qmqd: filepath.Join(bin, "qmqd"), qmqctl: filepath.Join(bin, "qmqctl"), ps: ps, log: logf}
	n := &natsSystem{server: filepath.Join(natsBin, "nats-server"), cli: filepath.Join(natsBin, "nats"), ps: ps, log: logf}
	res := results{}
	info := runInfo{commit: commit, date: time.Now().UTC().Format("2006-01-02 15:04 MST"), loadBefore: loadAverage(),
		rounds: o.rounds, quick: o.quick, command: "make bench-compare COMPARE='" + strings.Join(o.args, " ") + "'"}
	if len(o.args) == 0 {
		info.command = "make bench-compare"
	}
	failures := 0
	for r := range o.rounds {
		order := []system{q, n}
		if r%2 == 1 {
			order = []system{n, q}
		}
		for _, s := range order {
			dir := filepath.Join(tmp, fmt.Sprintf("round%d-%s", r+1, s.name()))
			fmt.Fprintf(os.Stderr, "== round %d/%d: %s (load %s)\n", r+1, o.rounds, s.name(), loadAverage())
			failed, err := runRound(ctx, o, s, dir, res)
			failures += failed
			if err != nil {
				where := "run with --keep to keep the logs"
				if o.keep {
					where = "logs in " + dir + " and " + logf.Name()
				}
				return fmt.Errorf("round %d, %s: %w (%s)", r+1, s.name(), err, where)
			}
			if !o.keep {
				os.RemoveAll(dir)
			}
		}
	}
	info.loadAfter = loadAverage()
	if o.png != "" {
		rel, err := filepath.Rel(filepath.Dir(o.out), o.png)
		if err != nil || o.out == "" {
			rel = o.png
		}
		info.png = rel
	}
	if err := writeReport(o, res, info); err != nil {
		return err
	}
	if failures > 0 {
		return fmt.Errorf("%d measurements failed (see the messages above; --keep keeps the logs)", failures)
	}
	return nil
}

package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// sizes are the runs' lengths, full or --quick.
type sizes struct {
	async128, async1k, drain int           // messages
	syncFor                  time.Duration // qmq: one in flight for this long
	syncMsgs                 int           // NATS: nats bench counts messages instead
	e2eFor, probeFor         time.Duration // a fixed-rate run; one probe of the search
	bisect                   int           // halvings after the doubling phase
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{async128: 20000, async1k: 10000, drain: 20000, syncFor: 2 * time.Second, syncMsgs: 500,
			e2eFor: 3 * time.Second, probeFor: 2 * time.Second, bisect: 1}
	}
	return sizes{async128: 200000, async1k: 100000, drain: 200000, syncFor: 10 * time.Second, syncMsgs: 5000,
		e2eFor: 10 * time.Second, probeFor: 5 * time.Second, bisect: 3}
}

// runRound starts a fresh cluster of s under dir, runs the workloads
// chosen, reads each node's memory and disk, and stops it. A failed
// measurement is reported and counted, and the round goes on; a cluster
// that does not start ends the run.
func runRound(ctx context.Context, o *options, s system, dir string, res results) (failed int, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	defer s.stop()
	if err := s.start(ctx, dir); err != nil {
		if ctx.Err() == nil {
			tailLogs(dir)
		}
		return 0, err
	}
	sz := sizesFor(o.quick)
	name := s.name()
	note := func(what string, err error) {
		failed++
		fmt.Fprintf(os.Stderr, "   %s: FAILED: %v\n", what, err)
	}
	show := func(what string, v float64, unit string) {
		fmt.Fprintf(os.Stderr, "   %-34s %s %s\n", what, fmtValue(v, unit), unit)
	}
	asyncRate := math.NaN()
	if o.runs("async-128") || o.runs("e2e-half") || o.runs("max-rate") {
		before, err := totalWrites(s.pids())
		if err != nil {
			return failed, err
		}
		if v, err := s.asyncPublish(ctx, 128, sz.async128); err != nil {
			note("async-128", err)
		} else {
			asyncRate = v
			after, err := totalWrites(s.pids())
			if err != nil {
				return failed, err
			}
			perNode := float64(after-before) / float64(len(s.pids()))
			res.add(name, "async128", v)
			res.add(name, "wbytes", perNode/float64(sz.async128*128))
			show("async-128", v, "msgs/s")
			show("  bytes written per node per byte", perNode/float64(sz.async128*128), "B/B")
		}
	}
	if o.runs("async-1k") {
		if v, err := s.asyncPublish(ctx, 1024, sz.async1k); err != nil {
			note("async-1k", err)
		} else {
			res.add(name, "async1k", v)
			show("async-1k", v, "msgs/s")
		}
	}
	if o.runs("sync-128") {
		if v, p50, err := s.syncPublish(ctx, 128, sz.syncFor, sz.syncMsgs); err != nil {
			note("sync-128", err)
		} else {
			res.add(name, "sync128", v)
			res.add(name, "sync128p50", p50)
			show("sync-128", v, "msgs/s")
			show("  p50", p50, "ms")
		}
	}
	if o.runs("drain-128") {
		if v, err := s.drain(ctx, 128, sz.drain); err != nil {
			note("drain-128", err)
		} else {
			res.add(name, "drain128", v)
			show("drain-128", v, "msgs/s")
		}
	}
	if o.runs("max-rate") {
		if v, err := searchRate(ctx, s, sz, asyncRate); err != nil {
			note("max-rate", err)
		} else {
			res.add(name, "maxrate", v)
			show("max-rate", v, "msgs/s")
		}
	}
	if o.runs("e2e-20k") {
		if f, err := s.e2e(ctx, 128, 20000, sz.e2eFor); err != nil {
			note("e2e-20k", err)
		} else if err := f.complete(); err != nil {
			note("e2e-20k", err)
		} else {
			res.add(name, "e2e20kp99", f.p99)
			res.add(name, "e2e20kp999", f.p999)
			res.add(name, "e2e20krate", f.achieved)
			show("e2e-20k: p99", f.p99, "ms")
			show("  p99.9", f.p999, "ms")
			show("  achieved", f.achieved, "msgs/s")
		}
	}
	if o.runs("e2e-half") {
		if math.IsNaN(asyncRate) {
			note("e2e-half", fmt.Errorf("no async 128 B rate this round to halve"))
		} else if f, err := s.e2e(ctx, 128, int(asyncRate/2), sz.e2eFor); err != nil {
			note("e2e-half", err)
		} else if err := f.complete(); err != nil {
			note("e2e-half", err)
		} else {
			res.add(name, "e2ehalfp99", f.p99)
			res.add(name, "e2ehalfrate", f.achieved)
			show(fmt.Sprintf("e2e-half (%d msgs/s): p99", int(asyncRate/2)), f.p99, "ms")
			show("  achieved", f.achieved, "msgs/s")
		}
	}
	var rss, hwm, disk float64
	for _, pid := range s.pids() {
		m, err := readMemory(pid)
		if err != nil {
			return failed, err
		}
		rss, hwm = max(rss, float64(m.rss)/(1<<20)), max(hwm, float64(m.hwm)/(1<<20))
	}
	for _, d := range s.dataDirs() {
		b, err := diskUsage(d)
		if err != nil {
			return failed, err
		}
		disk += float64(b) / (1 << 20) / float64(len(s.dataDirs()))
	}
	res.add(name, "rss", rss)
	res.add(name, "hwm", hwm)
	res.add(name, "disk", disk)
	show("RSS, largest node", rss, "MiB")
	show("peak RSS, largest node", hwm, "MiB")
	show("disk per node", disk, "MiB")
	return failed, nil
}

// totalWrites sums write_bytes over the processes.
func totalWrites(pids []int) (int64, error) {
	var total int64
	for _, pid := range pids {
		w, err := writeBytes(pid)
		if err != nil {
			return 0, err
		}
		total += w
	}
	return total, nil
}

// searchRate finds the highest rate one consumer keeps up with (see
// e2eFigures.keptUp): doubling from 5,000 msgs/s (at most to the round's
// async rate, when known), halving if 5,000 is too much, then bisecting.
func searchRate(ctx context.Context, s system, sz sizes, ceiling float64) (float64, error) {
	if math.IsNaN(ceiling) || ceiling <= 0 {
		ceiling = 1e6
	}
	probe := func(rate float64) (bool, error) {
		f, err := s.e2e(ctx, 128, int(rate), sz.probeFor)
		if err != nil {
			return false, err
		}
		fmt.Fprintf(os.Stderr, "     probe %s msgs/s: achieved %s, received %d of %d, p99 %s ms → kept up: %v\n",
			fmtValue(rate, "msgs/s"), fmtValue(f.achieved, "msgs/s"), f.received, f.sent, fmtValue(f.p99, "ms"), f.keptUp())
		return f.keptUp(), nil
	}
	lo, hi := 0.0, 0.0
	for rate := 5000.0; ; rate = math.Min(rate*2, ceiling) {
		ok, err := probe(rate)
		if err != nil {
			return 0, err
		}
		if !ok {
			hi = rate
			break
		}
		lo = rate
		if rate >= ceiling {
			return lo, nil
		}
	}
	if lo == 0 {
		for rate := hi / 2; ; rate /= 2 {
			if rate < 100 {
				return 0, fmt.Errorf("the consumer keeps up with no rate from 100 msgs/s")
			}
			ok, err := probe(rate)
			if err != nil {
				return 0, err
			}
			if ok {
				lo = rate
				break
			}
			hi = rate
		}
	}
	for range sz.bisect {
		mid := math.Round((lo + hi) / 2)
		ok, err := probe(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// writeReport prints the table, and writes it into --out and the chart
// into --png.
func writeReport(o *options, res results, info runInfo) error {
	block := markdown(res, info)
	fmt.Print(block)
	if o.out == "" {
		return nil
	}
	doc, err := os.ReadFile(o.out)
	if err != nil {
		return err
	}
	updated, err := replaceBlock(string(doc), block)
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.out, []byte(updated), 0o644); err != nil {
		return err
	}
	f, err := os.Create(o.png)
	if err != nil {
		return err
	}
	if err := writeChart(f, res.lines()); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s and %s\n", o.out, o.png)
	return nil
}

// goCmd runs the go command in dir with env added.
func goCmd(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// tailLogs prints the last lines of every log under dir, for a cluster
// that did not start (the directory is removed afterwards).
func tailLogs(dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(os.Stderr, "--- the end of %s\n%s\n", filepath.Base(l), strings.Join(lines[max(len(lines)-15, 0):], "\n"))
	}
}

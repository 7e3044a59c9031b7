package main

import (
	"bytes"
	"image/png"
	"math"
	"strings"
	"testing"
)

func sampleResults() results {
	r := results{}
	for _, v := range []float64{60000, 50000, 70000} {
		r.add("qmq", "async128", v)
	}
	for _, v := range []float64{88000, 90000, 86000} {
		r.add("NATS", "async128", v)
	}
	r.add("qmq", "sync128p50", 1.5)
	r.add("NATS", "sync128p50", 0.64)
	r.add("qmq", "rss", 90)
	r.add("NATS", "rss", 100)
	r.add("qmq", "disk", 12) // measured on one side only
	return r
}

func TestMarkdownTable(t *testing.T) {
	md := markdown(sampleResults(), runInfo{commit: "abc1234", date: "2026-12-01 00:00 UTC", command: "make bench-compare",
		loadBefore: "0.10 0.20 0.30", loadAfter: "1.00 1.10 1.20", rounds: 3, png: "bench-compare.png"})
	for _, want := range []string{
		beginMarker, endMarker, "Commit `abc1234`", "medians of 3 rounds", "0.10 0.20 0.30 before", "`make bench-compare`",
		"| workload | NATS | qmq | qmq / NATS | goal |",
		"| async produce 128 B, 1,000 in flight (msgs/s) | 88,000 | 60,000 | 0.68 | ≥ 2× NATS: not met |",
		"| one in flight, 128 B: p50 (ms) | 0.640 | 1.500 | 2.34 | ≤ 0.6× NATS: not met |",
		"| RSS per node after the runs (VmRSS, largest node) (MiB) | 100 | 90 | 0.90 | ≤ 1× NATS: met |",
		"(MiB) | — | 12 | — | ≤ 1× NATS |",
		"![qmq against NATS JetStream, each row scaled to its larger figure](bench-compare.png)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the table lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "async produce 1 KiB") {
		t.Error("a row measured on neither system is in the table")
	}
	quick := markdown(sampleResults(), runInfo{quick: true, rounds: 1})
	if !strings.Contains(quick, "--quick smoke run") || strings.Contains(quick, "![") {
		t.Errorf("a quick run without a chart:\n%s", quick)
	}
}

func TestMedianAndFormats(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 1 2 = %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median of 4 1 2 3 = %v", m)
	}
	if !math.IsNaN(median(nil)) {
		t.Error("the median of nothing is a number")
	}
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{1234567.4, "msgs/s", "1,234,567"}, {999, "msgs/s", "999"}, {1000, "msgs/s", "1,000"}, {0, "msgs/s", "0"},
		{0.6412, "ms", "0.641"}, {12.34, "ms", "12.3"}, {1751.2, "ms", "1,751"}, {3.636, "B/B", "3.64"},
		{math.NaN(), "ms", "—"}, {-1234, "MiB", "-1,234"},
	} {
		if got := fmtValue(tc.v, tc.unit); got != tc.want {
			t.Errorf("fmtValue(%v, %s) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}

func TestReplaceBlock(t *testing.T) {
	block := beginMarker + "\nnew\n" + endMarker + "\n"
	doc := "# Benchmarks\n\ntext\n\n" + beginMarker + "\nold\n" + endMarker + "\n\nafter\n"
	got, err := replaceBlock(doc, block)
	if err != nil || got != "# Benchmarks\n\ntext\n\n"+block+"\nafter\n" {
		t.Errorf("replaced:\n%q\n%v", got, err)
	}
	// Replacing again changes nothing.
	if again, err := replaceBlock(got, block); err != nil || again != got {
		t.Errorf("a second replacement changed the document:\n%q", again)
	}
	if got, err := replaceBlock("no markers", block); err != nil || got != "no markers\n\n"+block {
		t.Errorf("appended: %q, %v", got, err)
	}
	for _, bad := range []string{
		beginMarker + " only the start",
		"only the end " + endMarker,
		endMarker + " reversed " + beginMarker,
		beginMarker + endMarker + beginMarker + endMarker,
	} {
		if _, err := replaceBlock(bad, block); err == nil {
			t.Errorf("accepted markers in %q", bad)
		}
	}
}

func TestChartIsAPNG(t *testing.T) {
	var b bytes.Buffer
	ls := sampleResults().lines()
	if err := writeChart(&b, ls); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := img.Bounds().Dy(), chartTop+len(ls)*rowHeight+10; got != want || img.Bounds().Dx() != chartWidth {
		t.Errorf("chart %v, want %d × %d", img.Bounds(), chartWidth, want)
	}
	// The longer bar of the first row (NATS async: 88,000) spans chartBarMax.
	y := chartTop + barHeight/2
	if r, g, bl, _ := img.At(chartLeft+chartBarMax-1, y).RGBA(); uint8(r>>8) != colorNATS.R || uint8(g>>8) != colorNATS.G || uint8(bl>>8) != colorNATS.B {
		t.Errorf("the end of NATS's bar is not its colour")
	}
	for _, l := range rows {
		for _, c := range l.short {
			if _, ok := glyphs[c]; !ok {
				t.Errorf("row %s: no glyph for %q", l.key, c)
			}
		}
	}
}

func TestNatsConfig(t *testing.T) {
	c := natsConfig("n2", "/tmp/x/n2", 4222, 6222, []int{6221, 6222, 6223})
	for _, want := range []string{
		"server_name: n2\n", "listen: 127.0.0.1:4222\n", "store_dir: \"/tmp/x/n2\"\n", "sync_interval: always\n",
		"listen: 127.0.0.1:6222\n", "routes: [nats-route://127.0.0.1:6221, nats-route://127.0.0.1:6222, nats-route://127.0.0.1:6223]",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("config lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "0.0.0.0") {
		t.Error("a server listens beyond loopback")
	}
}

func TestParseNatsBench(t *testing.T) {
	out := "NATS JetStream synchronous publisher stats: 1,530 msgs/sec ~ 66 KiB/sec ~ min: 1,122.37us ~ avg: 1,883.08us ~ max: 7,587.17us ~ P50: 1,739.75us ~ P90: 2,534.29us\n"
	rate, p50, err := parseNatsBench(out)
	if err != nil || rate != 1530 || math.Abs(p50-1.73975) > 1e-9 {
		t.Errorf("parsed %v, %v, %v", rate, p50, err)
	}
	rate, p50, err = parseNatsBench("NATS JetStream durable consumer (callback) stats: 25,665 msgs/sec ~ 3.1 MiB/sec\n")
	if err != nil || rate != 25665 || p50 != 0 {
		t.Errorf("consumer line: %v, %v, %v", rate, p50, err)
	}
	if _, _, err := parseNatsBench("nats: error: could not access stream"); err == nil {
		t.Error("an error message parsed as figures")
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--quick", "--only", "async-128, e2e-20k", "--out", "/x/docs/b.md"})
	if err != nil || !o.quick || !o.runs("async-128") || !o.runs("e2e-20k") || o.runs("drain-128") || o.png != "/x/docs/bench-compare.png" || o.rounds != 3 {
		t.Errorf("parsed %+v, %v", o, err)
	}
	all, err := parseFlags(nil)
	if err != nil || !all.runs("drain-128") {
		t.Errorf("defaults: %+v, %v", all, err)
	}
	for _, bad := range [][]string{{"--only", "nope"}, {"--rounds", "0"}, {"--rounds", "51"}, {"stray"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
}

func TestKeptUp(t *testing.T) {
	ok := e2eFigures{asked: 1000, achieved: 950, sent: 100, received: 100, p99: keepUpP99}
	if !ok.keptUp() {
		t.Errorf("%+v did not keep up", ok)
	}
	for _, bad := range []e2eFigures{
		{asked: 1000, achieved: 949, sent: 100, received: 100, p99: 1},
		{asked: 1000, achieved: 1000, sent: 100, received: 99, p99: 1},
		{asked: 1000, achieved: 1000, sent: 100, received: 100, p99: keepUpP99 + 0.001},
		{asked: 1000, achieved: 1000},
	} {
		if bad.keptUp() {
			t.Errorf("%+v kept up", bad)
		}
	}
}

func TestE2EComplete(t *testing.T) {
	if err := (e2eFigures{sent: 10, received: 10}).complete(); err != nil {
		t.Error(err)
	}
	for _, bad := range []e2eFigures{{}, {sent: 10, received: 9}, {sent: 10}} {
		if bad.complete() == nil {
			t.Errorf("%+v taken as complete", bad)
		}
	}
}

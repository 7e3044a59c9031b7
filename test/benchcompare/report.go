package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// results holds every figure: system ("qmq", "NATS") → row key → one
// value per round.
type results map[string]map[string][]float64

func (r results) add(system, key string, v float64) {
	if r[system] == nil {
		r[system] = map[string][]float64{}
	}
	r[system][key] = append(r[system][key], v)
}

// runInfo is what the report says of the sitting.
type runInfo struct {
	commit, date, command string
	loadBefore, loadAfter string
	rounds                int
	quick                 bool
	png                   string // the chart, relative to the markdown file
}

const (
	beginMarker = "<!-- bench-compare:begin -->"
	endMarker   = "<!-- bench-compare:end -->"
)

// line is one row's medians.
type line struct {
	row         row
	nats, qmq   float64 // NaN when not measured
	ratio       float64 // qmq / NATS, NaN when either is missing or NATS is 0
	met, judged bool
}

// lines returns the medians of every row measured on either system.
func (r results) lines() []line {
	var out []line
	for _, rw := range rows {
		l := line{row: rw, nats: median(r["NATS"][rw.key]), qmq: median(r["qmq"][rw.key]), ratio: math.NaN()}
		if math.IsNaN(l.nats) && math.IsNaN(l.qmq) {
			continue
		}
		if !math.IsNaN(l.nats) && !math.IsNaN(l.qmq) && l.nats != 0 {
			l.ratio = l.qmq / l.nats
			if rw.goal > 0 {
				l.judged = true
				l.met = rw.higher && l.ratio >= rw.goal || !rw.higher && l.ratio <= rw.goal
			}
		}
		out = append(out, l)
	}
	return out
}

// markdown is the block written between the markers.
func markdown(r results, info runInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", beginMarker)
	kind := "medians of %d rounds"
	if info.quick {
		kind = "a --quick smoke run (short runs, not for comparison), medians of %d rounds"
	}
	fmt.Fprintf(&b, "Commit `%s`, %s; "+kind+". Load average (1, 5, 15 min) %s before, %s after. `%s`\n\n",
		info.commit, info.date, info.rounds, info.loadBefore, info.loadAfter, info.command)
	fmt.Fprintf(&b, "| workload | NATS | qmq | qmq / NATS | goal |\n|---|---|---|---|---|\n")
	for _, l := range r.lines() {
		goal := "—"
		if l.row.goal > 0 {
			op := "≥"
			if !l.row.higher {
				op = "≤"
			}
			goal = fmt.Sprintf("%s %s× NATS", op, strconv.FormatFloat(l.row.goal, 'f', -1, 64))
			if l.judged {
				if l.met {
					goal += ": met"
				} else {
					goal += ": not met"
				}
			}
		}
		fmt.Fprintf(&b, "| %s (%s) | %s | %s | %s | %s |\n", l.row.label, l.row.unit,
			fmtValue(l.nats, l.row.unit), fmtValue(l.qmq, l.row.unit), fmtRatio(l.ratio), goal)
	}
	if info.png != "" {
		fmt.Fprintf(&b, "\n![qmq against NATS JetStream, each row scaled to its larger figure](%s)\n", info.png)
	}
	fmt.Fprintf(&b, "%s\n", endMarker)
	return b.String()
}

// fmtValue prints a figure for its unit; "—" if it was not measured.
func fmtValue(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case unit == "msgs/s" || unit == "MiB":
		return groupThousands(int64(math.Round(v)))
	case unit == "B/B":
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 10:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return groupThousands(int64(math.Round(v)))
	}
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// groupThousands prints n with commas: 1234567 → 1,234,567.
func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// replaceBlock puts block between the markers of doc, replacing what was
// there; a doc without both markers gets it appended at its end.
func replaceBlock(doc, block string) (string, error) {
	i, j := strings.Index(doc, beginMarker), strings.Index(doc, endMarker)
	switch {
	case i < 0 && j < 0:
		if !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		return doc + "\n" + block, nil
	case i < 0 || j < i || strings.Count(doc, beginMarker) > 1 || strings.Count(doc, endMarker) > 1:
		return "", fmt.Errorf("bench-compare: the markers %s … %s are not one well-formed pair", beginMarker, endMarker)
	}
	return doc[:i] + block + strings.TrimPrefix(doc[j+len(endMarker):], "\n"), nil
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dockerfile is what a Dockerfile's final stage says of the image's
// configuration, and the RUN lines of every stage.
type dockerfile struct {
	user, workdir, stopSignal string
	entrypoint, env, ports    []string
	volumes                   []string
	labels                    map[string]string
	copies, runs              []string // the final stage's COPY lines, every stage's RUN lines
	args                      map[string]string
}

// parseDockerfile reads the instructions of the Dockerfile at path that
// make the final stage's configuration, expanding the final stage's ARG
// defaults (the builds without --build-arg).
func parseDockerfile(path string) (*dockerfile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(l)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur.WriteString(strings.TrimSuffix(t, "\\") + " ")
			continue
		}
		cur.WriteString(t)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	var d *dockerfile
	var runs []string
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		if strings.EqualFold(instr, "FROM") {
			d = &dockerfile{labels: map[string]string{}, args: map[string]string{}}
			continue
		}
		if d == nil {
			continue // global ARGs
		}
		expand := func(s string) string {
			return os.Expand(s, func(k string) string { return d.args[k] })
		}
		switch strings.ToUpper(instr) {
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			d.args[k] = v
		case "RUN":
			runs = append(runs, rest)
		case "COPY":
			d.copies = append(d.copies, rest)
		case "USER":
			d.user = expand(rest)
		case "WORKDIR":
			d.workdir = expand(rest)
		case "STOPSIGNAL":
			d.stopSignal = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entrypoint); err != nil {
				return nil, fmt.Errorf("ENTRYPOINT %s: not the exec (JSON) form: %w", rest, err)
			}
		case "VOLUME":
			if err := json.Unmarshal([]byte(rest), &d.volumes); err != nil {
				return nil, fmt.Errorf("VOLUME %s: not the JSON form: %w", rest, err)
			}
		case "EXPOSE":
			for _, p := range words(rest) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				d.ports = append(d.ports, p)
			}
		case "ENV":
			for _, kv := range words(rest) {
				if !strings.Contains(kv, "=") {
					return nil, fmt.Errorf("ENV %s: not the KEY=VALUE form", rest)
				}
				d.env = append(d.env, expand(kv))
			}
		case "LABEL":
			for _, kv := range words(rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("LABEL %s: not the KEY=VALUE form", rest)
				}
				d.labels[k] = expand(v)
			}
		}
	}
	if d == nil {
		return nil, fmt.Errorf("%s: no FROM", path)
	}
	d.runs = runs
	return d, nil
}

// words splits s into words as a shell would: on spaces outside double
// quotes, the quotes removed.
func words(s string) []string {
	var out []string
	var w strings.Builder
	in, has := false, false
	for _, r := range s {
		switch {
		case r == '"':
			in, has = !in, true
		case r == ' ' && !in:
			if has {
				out = append(out, w.String())
			}
			w.Reset()
			has = false
		default:
			w.WriteRune(r)
			has = true
		}
	}
	if has {
		out = append(out, w.String())
	}
	return out
}

// TestDockerfile: deploy/Dockerfile's final stage has the configuration the
// engine-less builder writes (config.go), its build stage builds the same
// binaries the same way, and it copies the same /etc/passwd and /etc/group
// and gives the data directory to the same user.
func TestDockerfile(t *testing.T) {
	d, err := parseDockerfile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	want := imageConfig(defaultVersion, defaultRevision)
	if d.user != want.User {
		t.Errorf("Dockerfile USER %q, the builder's %q", d.user, want.User)
	}
	if !slices.Equal(d.entrypoint, want.Entrypoint) {
		t.Errorf("Dockerfile ENTRYPOINT %q, the builder's %q", d.entrypoint, want.Entrypoint)
	}
	if !slices.Equal(d.env, want.Env) {
		t.Errorf("Dockerfile ENV %q, the builder's %q", d.env, want.Env)
	}
	if d.workdir != want.WorkingDir {
		t.Errorf("Dockerfile WORKDIR %q, the builder's %q", d.workdir, want.WorkingDir)
	}
	if d.stopSignal != want.StopSignal {
		t.Errorf("Dockerfile STOPSIGNAL %q, the builder's %q", d.stopSignal, want.StopSignal)
	}
	if got, w := setOf(d.ports), want.ExposedPorts; !sameKeys(got, w) {
		t.Errorf("Dockerfile EXPOSE %q, the builder's %q", d.ports, keys(w))
	}
	if got, w := setOf(d.volumes), want.Volumes; !sameKeys(got, w) {
		t.Errorf("Dockerfile VOLUME %q, the builder's %q", d.volumes, keys(w))
	}
	for k, v := range want.Labels {
		if got, ok := d.labels[k]; !ok || got != v {
			t.Errorf("Dockerfile LABEL %s=%q (present: %v), the builder's %q", k, got, ok, v)
		}
	}
	for k, v := range d.labels {
		if _, ok := want.Labels[k]; !ok {
			t.Errorf("Dockerfile LABEL %s=%q: the builder has none", k, v)
		}
	}
	if d.args["VERSION"] != defaultVersion || d.args["REVISION"] != defaultRevision {
		t.Errorf("Dockerfile ARG VERSION=%q REVISION=%q, the builder's defaults %q %q", d.args["VERSION"], d.args["REVISION"], defaultVersion, defaultRevision)
	}

	// The build: one RUN line holds goBuildEnv, goBuild and the binaries.
	built := false
	for _, r := range d.runs {
		w := words(r)
		if !slices.Contains(w, "go") || !slices.Contains(w, "build") {
			continue
		}
		built = true
		for _, a := range slices.Concat(goBuildEnv, goBuild[1:], binaries) {
			if !slices.Contains(w, a) {
				t.Errorf("Dockerfile's go build (RUN %s) lacks %q, which the builder gives", r, a)
			}
		}
	}
	if !built {
		t.Error("Dockerfile: no RUN line with go build")
	}

	// The files of the final stage.
	copies := strings.Join(d.copies, "\n")
	for _, re := range []string{
		`(?m)^deploy/image/rootfs/etc/passwd deploy/image/rootfs/etc/group /etc/$`,
		`(?m)^--from=build ` + regexp.QuoteMeta(caFile) + ` ` + regexp.QuoteMeta(caFile) + `$`,
		`(?m)^--from=build /out/qmqd /out/qmqctl ` + regexp.QuoteMeta(binDir) + `/$`,
		fmt.Sprintf(`(?m)^--from=build --chown=%d:%d --chmod=0750 \S+ %s$`, uid, gid, regexp.QuoteMeta(dataDir)),
	} {
		if !regexp.MustCompile(re).MatchString(copies) {
			t.Errorf("Dockerfile: no COPY line matching %s among\n%s", re, copies)
		}
	}
}

func setOf(l []string) map[string]struct{} {
	m := map[string]struct{}{}
	for _, k := range l {
		m[k] = struct{}{}
	}
	return m
}

func sameKeys(a, b map[string]struct{}) bool {
	return slices.Equal(keys(a), keys(b))
}

func keys(m map[string]struct{}) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestWords: the Dockerfile's words split as a shell splits them.
func TestWords(t *testing.T) {
	got := words(`CGO_ENABLED=0 go build -ldflags="-s -w"  a="" "b c"`)
	want := []string{"CGO_ENABLED=0", "go", "build", "-ldflags=-s -w", "a=", "b c"}
	if !slices.Equal(got, want) {
		t.Fatalf("words: %q, want %q", got, want)
	}
}

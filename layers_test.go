package qmq_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The module's packages stand on floors, and every import runs down: a
// package imports only packages of a lower floor. The ground floor
// (internal/...) imports nothing of the module but itself; the commands,
// the examples and the test harnesses stand on the top floor and may import
// one another. docs/design.md draws the same picture.
var floors = []struct {
	pkg   string // a package, or a prefix ending in "/"
	floor int
}{
	{"internal/sdk", 2}, // what the SDK and package admin share: it stands on transport
	{"internal/", 0},
	{"logs", 1}, {"transport", 1}, {"server/raftlog", 1},
	{"delaywheel", 2}, {"fsm/dedup", 2}, {"fsm/snapshot", 2}, {"backup", 2},
	{"", 3}, // the SDK
	{"fsm", 3},
	{"admin", 4}, {"outbox", 4}, {"fsm/meta", 4},
	{"server/metaserver", 5}, {"console", 5},
	{"server", 6},
	{"cli/", 9}, {"examples/", 9}, {"test/", 9}, {"test", 9}, {"deploy/", 9},
}

func floorOf(pkg string) (int, bool) {
	for _, f := range floors {
		if f.pkg == pkg || strings.HasSuffix(f.pkg, "/") && strings.HasPrefix(pkg, f.pkg) {
			return f.floor, true
		}
	}
	return 0, false
}

func TestImportsRunDownTheFloors(t *testing.T) {
	const module = "github.com/qmqgo/qmq"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	own := func(path string) (string, bool) {
		if path == module {
			return "", true
		}
		return strings.CutPrefix(path, module+"/")
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg, ok := own(fields[0])
		if !ok {
			continue // test/benchcompare is a module of its own
		}
		floor, ok := floorOf(pkg)
		if !ok {
			t.Errorf("package %q stands on no floor: add it to floors (and to docs/design.md's picture)", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			dep, ok := own(imp)
			if !ok {
				continue
			}
			depFloor, ok := floorOf(dep)
			switch {
			case !ok:
				t.Errorf("package %q stands on no floor: add it to floors", dep)
			case depFloor > floor || depFloor == floor && floor != 0 && floor != 9:
				t.Errorf("%q (floor %d) imports %q (floor %d): imports must run down", pkg, floor, dep, depFloor)
			}
		}
	}
}

package qmq_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The SDK links only the client's floor: the wire protocol (transport),
// the message encoding (logs) and the small shared pieces (internal/...);
// package admin links package qmq too. An application that sends,
// consumes or administers must not link Raft, bolt or the broker's code.
func TestSDKDependsOnlyOnTheClientFloor(t *testing.T) {
	const module = "github.com/qmqgo/qmq"
	for _, pkg := range sdkPackages {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for dep := range strings.FieldsSeq(string(out)) {
			for _, banned := range []string{"hashicorp/raft", "bbolt", "boltdb", "/fsm", "/server", "/delaywheel"} {
				if strings.Contains(dep, banned) {
					t.Errorf("%s depends on %s (it must not link anything matching %q)", pkg, dep, banned)
				}
			}
			own, ok := strings.CutPrefix(dep, module+"/")
			if !ok || dep == pkg {
				continue
			}
			if own != "transport" && own != "logs" && !strings.HasPrefix(own, "internal/") {
				t.Errorf("%s depends on %s: only transport, logs and internal/... of this module are allowed", pkg, dep)
			}
		}
	}
}

// The SDK links few modules besides the standard library, each for a
// reason: golang.org/x/sys (the file system calls of the TLS files'
// reloading, and go-isatty's), go-hclog and what it links (transport's
// logging), and the OpenTelemetry API for traces
// (go.opentelemetry.io/otel with its trace, propagation and attribute
// packages, and what they link: go-logr, the API's auto-instrumentation
// hook, xxhash). The API alone: an application that traces chooses and
// links an OpenTelemetry SDK (go.opentelemetry.io/otel/sdk) itself, and
// one that does not pays for a no-op. A module added to the SDK's
// dependencies is added here, with its reason.
func TestSDKLinksFewModules(t *testing.T) {
	allowed := []string{
		"golang.org/x/sys/",
		"github.com/hashicorp/go-hclog", "github.com/fatih/color", "github.com/mattn/go-colorable", "github.com/mattn/go-isatty",
		"go.opentelemetry.io/otel", "go.opentelemetry.io/auto/sdk", "github.com/go-logr/", "github.com/cespare/xxhash/",
	}
	for _, pkg := range sdkPackages {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for dep := range strings.FieldsSeq(string(out)) {
			if dep == "github.com/qmqgo/qmq" || strings.HasPrefix(dep, "github.com/qmqgo/qmq/") {
				continue
			}
			if strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(dep, "go.opentelemetry.io/otel/exporters") {
				t.Errorf("%s links %s: the SDK links the OpenTelemetry API only, the application its SDK", pkg, dep)
				continue
			}
			ok := false
			for _, a := range allowed {
				ok = ok || dep == a || strings.HasPrefix(dep, strings.TrimSuffix(a, "/")+"/")
			}
			if !ok {
				t.Errorf("%s links %s, a module the SDK is not meant to link (add it to this test with its reason if it must)", pkg, dep)
			}
		}
	}
}

// The SDK's documentation, exported declarations included, names no
// package a user cannot import or should not build on (the broker's,
// the message log's, internal/...): what it says a user needs (a limit, an
// error) is the SDK's own. It may name transport, the wire protocol, and
// outbox, a package built on it.
func TestSDKDocsNameNoServerPackage(t *testing.T) {
	const module = "github.com/qmqgo/qmq"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	public := map[string]bool{module: true, module + "/admin": true, module + "/transport": true, module + "/outbox": true}
	hidden := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		path, name, _ := strings.Cut(strings.TrimSpace(line), " ")
		own := strings.TrimPrefix(path, module+"/")
		if public[path] || name == "main" || own == "test" || strings.HasPrefix(own, "test/") {
			continue
		}
		hidden[name] = true
	}
	for _, name := range []string{"logs", "limits", "fsm", "server"} {
		if !hidden[name] {
			t.Fatalf("package %s is not among the module's packages: the check below would miss it", name)
		}
	}
	ident := regexp.MustCompile(`\b([a-z][a-z0-9]*)\.[A-Z]`)
	for _, pkg := range sdkPackages {
		doc, err := exec.Command("go", "doc", "-all", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go doc %s: %v\n%s", pkg, err, doc)
		}
		for i, line := range strings.Split(string(doc), "\n") {
			for _, m := range ident.FindAllStringSubmatch(line, -1) {
				if hidden[m[1]] {
					t.Errorf("go doc -all %s, line %d, names package %s: %s", pkg, i+1, m[1], strings.TrimSpace(line))
				}
			}
		}
	}
}

// sdkPackages are the SDK's public packages.
var sdkPackages = []string{"github.com/qmqgo/qmq", "github.com/qmqgo/qmq/admin"}

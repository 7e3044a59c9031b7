package qmq_test

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
)

// Each option satisfies the option types of what it configures: the build
// fails if one no longer does.
var (
	_ qmq.ConsumerOption  = qmq.WithConsumerName("c")
	_ qmq.ConsumerOption  = qmq.WithLogger(nil)
	_ qmq.ConsumerOption  = qmq.StartAt(qmq.Earliest)
	_ qmq.ConsumerOption  = qmq.StartAtTime(time.Time{})
	_ qmq.ConsumerOption  = qmq.WithTags("t")
	_ qmq.ConsumerOption  = qmq.WithAllTags("t")
	_ qmq.ConsumerOption  = qmq.WithAtMostOnce()
	_ qmq.ConsumerOption  = qmq.WithBroadcast(0)
	_ qmq.PullerOption    = qmq.WithConsumerName("c")
	_ qmq.PullerOption    = qmq.WithLogger(nil)
	_ qmq.SubscribeOption = qmq.WithConsumerName("c")
	_ qmq.SubscribeOption = qmq.WithLogger(nil)
	_ qmq.SubscribeOption = qmq.WithWorkers(1)
	_ qmq.SubscribeOption = qmq.WithPullBatch(1)
	_ qmq.SubscribeOption = qmq.WithPullWait(time.Second)
	_ qmq.ProducerOption  = qmq.WithTracerProvider(nil)
	_ qmq.ProducerOption  = qmq.WithPropagator(nil)
	_ qmq.PullerOption    = qmq.WithTracerProvider(nil)
	_ qmq.PullerOption    = qmq.WithPropagator(nil)
	_ qmq.SubscribeOption = qmq.WithTracerProvider(nil)
	_ qmq.SubscribeOption = qmq.WithPropagator(nil)
)

// An option that means nothing to a Puller does not compile as one (it
// used to be accepted and ignored). The snippets are type-checked against
// the package as built.
func TestSubscriptionOptionsAreNotPullerOptions(t *testing.T) {
	check := typeChecker(t)
	const ok = `qmq.NewPuller("s", "subject", "group", qmq.WithConsumerName("c"), qmq.WithLogger(nil))
	qmq.Subscribe("s", "subject", "group", nil, qmq.WithConsumerName("c"), qmq.WithLogger(nil),
		qmq.WithWorkers(1), qmq.WithPullBatch(1), qmq.WithPullWait(time.Second))`
	if err := check(ok); err != nil {
		t.Fatalf("the options each API takes do not compile: %v", err)
	}
	for _, opt := range []string{"qmq.WithWorkers(1)", "qmq.WithPullBatch(1)", "qmq.WithPullWait(time.Second)"} {
		err := check(`qmq.NewPuller("s", "subject", "group", ` + opt + `)`)
		if err == nil || !strings.Contains(err.Error(), "PullerOption") {
			t.Errorf("NewPuller with %s: type-checks with %v, want an error naming PullerOption", opt, err)
		}
	}
}

// typeChecker returns a function that type-checks a function body using
// packages qmq and time, against the export data of the packages as built.
func typeChecker(t *testing.T) func(body string) error {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", "github.com/qmqgo/qmq", "time").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, file, ok := strings.Cut(strings.TrimSpace(line), "\t"); ok {
			exports[path] = file
		}
	}
	return func(body string) error {
		src := "package snippet\n\nimport (\n\t\"time\"\n\n\t\"github.com/qmqgo/qmq\"\n)\n\nvar _ = time.Second\n\nfunc _() {\n\t" + body + "\n}\n"
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "snippet.go", src, 0)
		if err != nil {
			t.Fatalf("snippet: %v", err)
		}
		imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			if file := exports[path]; file != "" {
				return os.Open(file)
			}
			return nil, fmt.Errorf("no export data for %s", path)
		})
		_, err = (&types.Config{Importer: imp}).Check("snippet", fset, []*ast.File{f}, nil)
		return err
	}
}

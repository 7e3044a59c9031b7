package qmq_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The SDK links only the client's floor: the wire protocol (transport),
// the message encoding (logs) and the small shared pieces (internal/...).
// An application that sends or consumes must not link Raft, bolt or the
// broker's code.
func TestSDKDependsOnlyOnTheClientFloor(t *testing.T) {
	const module = "github.com/qmqgo/qmq"
	out, err := exec.Command("go", "list", "-deps", module).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", module, err, out)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, banned := range []string{"hashicorp/raft", "bbolt", "boltdb", "/fsm", "/server", "/delaywheel"} {
			if strings.Contains(dep, banned) {
				t.Errorf("the SDK depends on %s (it must not link anything matching %q)", dep, banned)
			}
		}
		own, ok := strings.CutPrefix(dep, module+"/")
		if !ok {
			continue
		}
		if own != "transport" && own != "logs" && !strings.HasPrefix(own, "internal/") {
			t.Errorf("the SDK depends on %s: only transport, logs and internal/... of this module are allowed", dep)
		}
	}
}

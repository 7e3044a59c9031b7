package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "31a01d6f00aa"}, {Key: "vcs.modified", Value: "false"}}},
			"v0.4.0 (commit 31a01d6, go1.26.8)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "31a01d6f00aa"}, {Key: "vcs.modified", Value: "true"}}},
			"devel (commit 31a01d6, modified, go1.26.8)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8"}, "devel (go1.26.8)"},
	} {
		if got := describe(c.info); got != c.want {
			t.Errorf("describe: %q, want %q", got, c.want)
		}
	}
	if s := String(); !strings.Contains(s, "go1.") {
		t.Errorf("String of this test binary: %q names no Go release", s)
	}
}

func TestRange(t *testing.T) {
	if !Supports(Min) || !Supports(Max) || Supports(Max+1) || Supports(0) {
		t.Errorf("Supports: want exactly %d to %d", Min, Max)
	}
	if got := (Range{}).OrV1(); got != (Range{V1, V1}) {
		t.Errorf("the zero Range is %v, want 1-1 (a node before gates)", got)
	}
	if got := Build().OrV1(); got != (Range{Min, Max}) || got.String() != "1-2" {
		t.Errorf("Build() = %v", got)
	}
}

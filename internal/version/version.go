// Package version says which build of qmqd and qmqctl is running (the
// module version, the commit it was built from, and the Go release, as
// the Go toolchain records them in the binary: String), and which version
// Numbers of the replicated formats and the wire it supports (Min to Max),
// against which each group's active Number gates what its leader proposes.
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// String returns the build's version, e.g. "v0.4.0 (commit 31a01d6, go1.26.8)"
// or, for a build of a checkout, "devel (commit 31a01d6, modified, go1.26.8)".
func String() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	return describe(info)
}

// describe is String of the build information info.
func describe(info *debug.BuildInfo) string {
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var commit string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var parts []string
	if commit != "" {
		parts = append(parts, "commit "+commit[:min(len(commit), 7)])
	}
	if modified {
		parts = append(parts, "modified")
	}
	parts = append(parts, info.GoVersion)
	return fmt.Sprintf("%s (%s)", v, strings.Join(parts, ", "))
}

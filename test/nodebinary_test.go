package test

import (
	"slices"
	"testing"
)

// A node on an earlier build gets its command line less the flags that
// build lacks, with their values; flags it knows, and flags unknown to
// this build too (for the binary to refuse), stay.
func TestKeepKnown(t *testing.T) {
	known := map[string]bool{"id": true, "data": true, "bootstrap": false}
	ours := map[string]bool{"id": true, "data": true, "bootstrap": false, "initial-version": true, "new-switch": false}
	args := []string{"broker", "--id", "a", "--initial-version", "1", "--data", "d", "--initial-version=2", "--new-switch",
		"--bootstrap", "--typo", "x"}
	kept, dropped := keepKnown(args, known, ours)
	if want := []string{"broker", "--id", "a", "--data", "d", "--bootstrap", "--typo", "x"}; !slices.Equal(kept, want) {
		t.Errorf("kept %q, want %q", kept, want)
	}
	if want := []string{"--initial-version", "1", "--initial-version=2", "--new-switch"}; !slices.Equal(dropped, want) {
		t.Errorf("dropped %q, want %q", dropped, want)
	}
}
func TestHelpFlag(t *testing.T) {
	for line, want := range map[string]map[string]bool{
		"   --data DIR                 where the node keeps its data":         {"data": true},
		"   --broker-group NAME, --group NAME   the broker group":             {"broker-group": true, "group": true},
		"   --meta HOST:PORT[,…]               metaserver HOST:PORT[,…]; ...": {"meta": true},
		"   --bootstrap                        form the group":                {"bootstrap": false},
		"   -h, --help   show help":                                           {"h": false, "help": false},
	} {
		f := helpFlag.FindStringSubmatch(line)
		if f == nil {
			t.Errorf("%q: no flag read", line)
			continue
		}
		got := map[string]bool{}
		for _, n := range flagNames.FindAllStringSubmatch(f[1], -1) {
			got[n[1]] = n[2] != ""
		}
		if len(got) != len(want) {
			t.Errorf("%q: read %v, want %v", line, got, want)
		}
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%q: read %v, want %v", line, got, want)
			}
		}
	}
}

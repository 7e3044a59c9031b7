// Package compose holds compose.yaml, a laptop cluster of three metaserver
// nodes and two broker groups of three (docs/deployment.md says how to run
// it). It has no code: its test loads the file with compose-go, checks what
// the cluster depends on, and runs its services' commands as processes on
// loopback.
package compose

// Package systemd holds qmqd's systemd units, their environment files and
// the sysusers.d and tmpfiles.d snippets that make the user and the data
// directory (docs/deployment.md says how to install them). It has no code:
// its test checks the units with systemd-analyze and runs their ExecStart
// command lines as processes.
package systemd

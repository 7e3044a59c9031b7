//go:build !linux

package transport

import "syscall"

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not known:
// keepalive alone bounds the silence of an idle connection.
func setUserTimeout(network, address string, c syscall.RawConn) error { return nil }

package test

import (
	"os"
	"testing"
)

// TestMain removes the qmqd and qmqctl binaries the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBinaries()
	os.Exit(code)
}

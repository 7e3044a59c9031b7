package test

import (
	"os"
	"testing"

	"github.com/qmqgo/qmq/test/testdb"
)

// TestMain runs the tests through testdb.Run, which stops the database
// servers they started, then removes the binaries they built.
func TestMain(m *testing.M) {
	code := testdb.Run(m)
	RemoveBinaries()
	RemoveAppBinaries()
	os.Exit(code)
}

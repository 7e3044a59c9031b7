package tlsconf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/qmqgo/qmq/internal/disk"
)

// ErrExists: WriteFiles would overwrite a file and was not told to.
var ErrExists = errors.New("tlsconf: file exists")

// WriteFiles stores a certificate and its key in dir (made, mode 0700, if
// missing) as name.pem (mode 0644) and name-key.pem (mode 0600). Each is
// written to a temporary file in dir, synced and renamed over its name,
// so a reader never sees half a file and a Reloader watching the names
// picks up the whole pair. Unless force, it refuses (ErrExists), before
// writing anything, if either name exists. name is a file name, not a
// path.
func WriteFiles(dir, name string, cert, key []byte, force bool) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("%w: %q is not a file name", ErrBadSpec, name)
	}
	certPath := filepath.Join(dir, name+".pem")
	keyPath := filepath.Join(dir, name+"-key.pem")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	if !force {
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%w: %s (give force to replace it)", ErrExists, p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("tlsconf: %w", err)
			}
		}
	}
	// The key first: a cert renamed in before its key would pair the new
	// cert with the old key until the key lands.
	if err := writeAtomic(keyPath, key, 0o600); err != nil {
		return err
	}
	if err := writeAtomic(certPath, cert, 0o644); err != nil {
		return err
	}
	if err := disk.SyncDir(dir); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	return nil
}

// writeAtomic writes data to path through a temporary file and a rename.
func writeAtomic(path string, data []byte, mode os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	return nil
}

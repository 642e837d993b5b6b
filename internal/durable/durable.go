// Package durable holds the file-system steps that several packages need
// to make a write survive a crash.
package durable

import (
	"os"
	"path/filepath"
)

// Sync fsyncs the file or directory at path: after a rename, syncing the
// directory makes the new name durable.
func Sync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteFile replaces dir/name with data, atomically and durably: data goes
// to a temporary file in dir, which is synced, renamed over name, and the
// directory synced. A crash leaves the old file or the new one, whole.
func WriteFile(dir, name string, data []byte, perm os.FileMode) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err == nil {
		err = Sync(dir)
	}
	return err
}

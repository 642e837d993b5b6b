// Package durable holds the one file-system step that several packages
// need to make a write survive a crash.
package durable

import "os"

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

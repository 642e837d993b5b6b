package spares

import (
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// privateSnapshots keeps the Raft snapshots under StateDir owner-only:
// raft's file snapshot store creates its directories 0755 and its files
// with the process umask. They sit inside the 0700 proc-<Proc> directory,
// so no other user can reach them even while a snapshot is written; once
// a snapshot is closed (or cancelled) its directory and files lose the
// group and other bits too.
type privateSnapshots struct {
	raft.SnapshotStore
	dir string // the store's snapshots directory
}

// newPrivateSnapshots wraps store, whose snapshots live in dir, and makes
// dir owner-only now.
func newPrivateSnapshots(store raft.SnapshotStore, dir string) (*privateSnapshots, error) {
	if err := restrictTree(dir); err != nil {
		return nil, err
	}
	return &privateSnapshots{SnapshotStore: store, dir: dir}, nil
}

func (s *privateSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &privateSink{SnapshotSink: sink, dir: s.dir}, nil
}

// privateSink restricts the snapshots directory when the snapshot ends.
type privateSink struct {
	raft.SnapshotSink
	dir string
}

func (k *privateSink) Close() error {
	err := k.SnapshotSink.Close()
	if rerr := restrictTree(k.dir); err == nil {
		err = rerr
	}
	return err
}

func (k *privateSink) Cancel() error {
	err := k.SnapshotSink.Cancel()
	if rerr := restrictTree(k.dir); err == nil {
		err = rerr
	}
	return err
}

// restrictTree clears the group and other permission bits of dir and
// everything under it. Entries that vanish meanwhile (a snapshot reaped)
// are skipped.
func restrictTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		info, err := d.Info()
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if m := info.Mode().Perm(); m&0o077 != 0 {
			if err := os.Chmod(path, m&^0o077); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
		return nil
	})
}

package simhost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lockDir holds one lock file per live cluster, ID.lock, flock()ed by
// its owner for the cluster's lifetime. The kernel drops the lock when the
// owner dies however it dies, so an unlocked file marks a cluster whose
// owner is gone, also across pid namespaces and after pid reuse.
const lockDir = "/run/gaspigo-simhost"

// takeLock creates and locks the lock file of cluster id. It is created
// before any kernel object, so everything a cluster made is covered.
func takeLock(id string) (*os.File, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(lockDir, id+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("simhost: lock %s: %w (another cluster of the same id is alive)", f.Name(), err)
	}
	return f, nil
}

// Sweep removes what clusters whose owners died left behind: for each lock
// file nobody holds, every namespace (and its processes), interface,
// /etc/netns entry and host directory named after that cluster. Clusters
// whose owner lives, in this process or another, are left alone. New
// calls it; a test binary may too, e.g. from TestMain.
func Sweep(ctx context.Context) error {
	ents, err := os.ReadDir(lockDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".lock")
		if _, stem, valid := ownerOf(id); !ok || !valid || stem != id {
			continue
		}
		f, err := os.OpenFile(filepath.Join(lockDir, e.Name()), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // its owner is alive
			continue
		}
		if err := removeID(id); err != nil {
			errs = append(errs, err)
		} else {
			os.Remove(f.Name())
		}
		f.Close()
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// removeID kills the processes of, and removes, every namespace,
// interface, /etc/netns entry and host directory of cluster id. Objects
// already gone are no error.
func removeID(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	stem := id + "-"
	var errs []error
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), stem) {
				continue
			}
			if _, err := killAll(e.Name()); err != nil {
				errs = append(errs, err)
			}
			if err := run(ctx, "netns", "del", e.Name()); err != nil && !gone(err) {
				errs = append(errs, err)
			}
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		// Veths first: deleting one end removes its peer too.
		for _, bridge := range []bool{false, true} {
			for _, i := range ifs {
				if strings.HasPrefix(i.Name, stem) && (i.Name == bridgeName(id)) == bridge {
					if err := run(ctx, "link", "del", i.Name); err != nil && !gone(err) {
						errs = append(errs, err)
					}
				}
			}
		}
	} else {
		errs = append(errs, err)
	}
	if ents, err := os.ReadDir("/etc/netns"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), stem) {
				if err := os.RemoveAll(filepath.Join("/etc/netns", e.Name())); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := os.RemoveAll(filepath.Join(os.TempDir(), id)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// gone reports whether an ip command failed because its object does not
// exist (any more). "No such device" is what RTNETLINK answers for a veth
// listed a moment before and removed since with its peer.
func gone(err error) bool {
	var ce *CmdError
	if !errors.As(err, &ce) {
		return false
	}
	o := ce.Output
	return strings.Contains(o, "Cannot find device") || strings.Contains(o, "No such device") || strings.Contains(o, "No such file") ||
		strings.Contains(o, "does not exist") || strings.Contains(o, "Invalid \"netns\"")
}

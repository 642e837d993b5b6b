package spares

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// The Raft snapshots under StateDir are owner-only once written, although
// raft's file store creates them 0755/0644: they hold the membership.
func TestSnapshotsOwnerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "proc-0")
	fss, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	snaps := filepath.Join(dir, "snapshots")
	ps, err := newPrivateSnapshots(fss, snaps)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		sink, err := ps.Create(raft.SnapshotVersionMax, 10*i, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write([]byte("membership state")); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			err = sink.Cancel()
		} else {
			err = sink.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if loose, err := proctest.LoosePerms(snaps); err != nil || len(loose) > 0 {
		t.Fatalf("snapshots readable by others (%v): %v", err, loose)
	}
	metas, err := ps.List()
	if err != nil || len(metas) != 2 {
		t.Fatalf("List = %v, %v; want the two closed snapshots", metas, err)
	}
	_, rc, err := ps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
}

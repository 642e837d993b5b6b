package shm

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// Variables of the child process of TestSIGKILLedPeer.
const (
	childTokenVar = "GASPIGO_SHM_TEST_TOKEN"
	childPeerVar  = "GASPIGO_SHM_TEST_PEER"
)

// TestChildSender is the child of TestSIGKILLedPeer, a no-op otherwise:
// proc 1, which prints its address, waits for a line on stdin, then sends
// frames to proc 0 until it is killed.
func TestChildSender(t *testing.T) {
	tok, peer := os.Getenv(childTokenVar), os.Getenv(childPeerVar)
	if tok == "" {
		t.Skip("runs as the child of TestSIGKILLedPeer")
	}
	token, _ := hex.DecodeString(tok)
	cfg := DefaultConfig()
	cfg.Self, cfg.Token = 1, token
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SetPeers(map[transport.Proc]string{0: peer}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(transporttest.NewRecorder()); err != nil {
		t.Fatal(err)
	}
	fmt.Println(tr.Addr())
	bufio.NewReader(os.Stdin).ReadString('\n')
	payload := make([]byte, 4096)
	for seq := uint64(0); ; seq++ {
		h := transport.Header{Type: transport.FrameWrite, Seq: seq}
		if err := tr.Send(context.Background(), 0, &h, payload); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSIGKILLedPeer: a peer process is SIGKILLed in the middle of a stream
// of frames. The survivor gets PeerDown once, promptly; its mapping of the
// dead process's ring is gone by then; and nothing was left in /dev/shm.
func TestSIGKILLedPeer(t *testing.T) {
	if os.Getenv(childTokenVar) != "" {
		t.Skip("this is the child")
	}
	before := devShm(t)
	token := auth.NewToken()
	cfg := DefaultConfig()
	cfg.Self, cfg.Token = 0, token
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	rec := transporttest.NewRecorder()
	ctx, cancel := context.WithTimeout(t.Context(), 2*transporttest.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestChildSender$", "-test.count=1")
	cmd.Env = append(os.Environ(), childTokenVar+"="+hex.EncodeToString(token), childPeerVar+"="+tr.Addr())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("child's address: %v", err)
	}
	if err := tr.SetPeers(map[transport.Proc]string{1: strings.TrimSpace(addr)}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(rec); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go")
	if _, err := rec.WaitFrames(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if n := ringMappings(t); n != 1 {
		t.Fatalf("%d ring mappings while the child sends, want 1 (its ring)", n)
	}
	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d, err := rec.WaitDown(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PeerDown %v after SIGKILL: %v; %d frames delivered", time.Since(killed).Round(time.Microsecond), d.Err, len(rec.Frames()))
	if !errors.Is(d.Err, transport.ErrPeerDown) {
		t.Errorf("PeerDown error %v does not wrap ErrPeerDown", d.Err)
	}
	for i, f := range rec.Frames() {
		if f.Header.Seq != uint64(i) {
			t.Fatalf("frame %d has Seq %d", i, f.Header.Seq)
		}
	}
	if n := ringMappings(t); n != 0 {
		t.Errorf("%d ring mappings after PeerDown, want 0", n)
	}
	cmd.Wait()
	if after := devShm(t); len(after) > len(before) {
		t.Errorf("/dev/shm holds %v after the test, %v before", after, before)
	}
}

// ringMappings counts this process's mappings of rings.
func ringMappings(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "memfd:gaspigo-ring")
}

// devShm lists the project's entries in /dev/shm (other programs on the
// machine may come and go there).
func devShm(t *testing.T) []string {
	t.Helper()
	es, _ := os.ReadDir("/dev/shm")
	var out []string
	for _, e := range es {
		if strings.Contains(e.Name(), "gaspigo") {
			out = append(out, e.Name())
		}
	}
	return out
}

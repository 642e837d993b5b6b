package kvjob

import (
	"context"
	"errors"
	"os"
	"testing"
)

// One slot: a second process's rank waits until the first releases it.
func TestGate(t *testing.T) {
	dir := t.TempDir()
	a, err := OpenGate(dir, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenGate(dir, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Acquire with the slot taken: %v, want it to wait (context canceled)", err)
	}
	a.Release()
	if err := b.Acquire(context.Background()); err != nil {
		t.Fatalf("Acquire after the release: %v", err)
	}
	b.Release()
	// Two slots: both hold one at once.
	c, _ := OpenGate(dir+"/two", 2, 0)
	d, _ := OpenGate(dir+"/two", 2, 1)
	defer c.Close()
	defer d.Close()
	if c.Acquire(context.Background()) != nil || d.Acquire(ctx) != nil {
		t.Fatal("two slots, two ranks: one had to wait")
	}
	if _, err := OpenGate(dir, 0, 0); err == nil {
		t.Fatal("OpenGate accepted 0 slots")
	}
	c.Remove()
	if _, err := os.Stat(dir + "/two"); !os.IsNotExist(err) {
		t.Fatalf("the slot directory is still there after Remove: %v", err)
	}
	var nilGate *Gate
	if nilGate.Acquire(ctx) != nil {
		t.Fatal("a nil Gate waited")
	}
}

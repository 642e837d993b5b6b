package kvshuffle

import "fmt"

// Spill asks this A task's merger to spill the received pairs it holds
// in memory to one sorted file in SpillDir, as memory pressure would, and
// returns at once; pairs that arrive later are held again. A rank that
// is about to wait a long time (BDMPI's blocking points: a checkpoint,
// its turn to compute) calls it to give its memory back meanwhile.
// Nothing happens on a rank that is not an A task or once Recv or Groups
// started; without SpillDir it is ErrConfig.
func (s *Shuffle) Spill() error {
	a := s.a
	if a == nil {
		return nil
	}
	if s.cfg.SpillDir == "" {
		return fmt.Errorf("kvshuffle: spill: no SpillDir: %w", ErrConfig)
	}
	a.mu.Lock()
	if !a.recvStarted {
		a.pressure = true
		a.signalLocked()
	}
	a.mu.Unlock()
	return nil
}

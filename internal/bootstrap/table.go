package bootstrap

import (
	"maps"
	"sync"
	"time"
)

// broadcastWorkers bounds the table writes in flight at once.
const broadcastWorkers = 64

// broadcast writes msg, the encoded table, to every target (in process
// order) with up to broadcastWorkers writes in flight: a process that
// does not read holds up one worker for at most WriteTimeout, not every
// process after it, and over a network the transfers overlap instead of
// taking a round trip each in turn. The one encoding is shared.
func (s *Server) broadcast(targets []*srvConn, msg []byte) {
	next := make(chan *srvConn)
	var wg sync.WaitGroup
	for range min(broadcastWorkers, len(targets)) {
		wg.Go(func() {
			for r := range next {
				r.wmu.Lock()
				r.rw.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
				_, werr := r.rw.Write(msg)
				r.wmu.Unlock()
				if werr != nil {
					// Part of the table may have gone out: cut the
					// connection, so that the process, which reads a
					// broken message or none, registers again and gets
					// the table then (register). A process starved of CPU
					// among hundreds on a few cores does this, and is not
					// at fault: information.
					r.rw.Close()
					s.log.Info("rendezvous: could not send the table; the process will register again", "proc", r.proc, "remote", r.remote, "err", werr)
				}
			}
		})
	}
	for _, r := range targets {
		next <- r
	}
	close(next)
	wg.Wait()
}

func cloneTable(t Table) Table {
	out := t
	out.Members = make([]Member, len(t.Members))
	for i, m := range t.Members {
		m.Extra = maps.Clone(m.Extra)
		out.Members[i] = m
	}
	return out
}

package bootstrap

import (
	"maps"
	"sync"
	"time"
)

// broadcastWorkers bounds the table writes in flight at once.
const broadcastWorkers = 64

// delivery is one message for one connection.
type delivery struct {
	to  *srvConn
	msg []byte
}

// broadcast writes each delivery's message to its connection, in order,
// with up to broadcastWorkers writes in flight: a process that does not
// read holds up one worker for at most WriteTimeout, not every process
// after it, and over a network the transfers overlap instead of taking a
// round trip each in turn. The table's one encoding is shared by the
// deliveries that carry it. A connection whose write fails is closed.
func (s *Server) broadcast(ds []delivery) {
	next := make(chan delivery)
	var wg sync.WaitGroup
	for range min(broadcastWorkers, len(ds)) {
		wg.Go(func() {
			for d := range next {
				r := d.to
				r.wmu.Lock()
				r.rw.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
				_, werr := r.rw.Write(d.msg)
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
	for _, d := range ds {
		next <- d
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

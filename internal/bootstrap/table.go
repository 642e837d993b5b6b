package bootstrap

import (
	"maps"
	"sync"
	"time"
)

// broadcastWorkers bounds the table writes in flight at once.
const broadcastWorkers = 64

// deliverTable sends the complete table t: whole to the processes that get
// it from the rendezvous (the roots of the relay tree) first, then a
// relay notice to each other process of targets (by process id), then to
// each joiner its own answer. It returns false when the table cannot be
// encoded.
func (s *Server) deliverTable(t Table, targets, joiners []*srvConn) bool {
	tbl := cloneTable(t)
	msg, err := encodeMsg(&envelope{Kind: msgTable, Table: &tbl}, MaxServerMessage)
	if err != nil {
		s.log.Error("rendezvous: cannot encode the member table", "err", err)
		return false
	}
	relayed, err := notices(targets, msg[4:])
	if err != nil {
		s.log.Error("rendezvous: cannot encode the relay notices", "err", err)
		return false
	}
	s.mu.Lock()
	s.tmsg = msg
	s.mu.Unlock()
	// The whole tables first: the others fetch theirs from these.
	ds := make([]delivery, 0, len(targets)+len(joiners))
	for p, r := range targets {
		if relayed[p] == nil {
			ds = append(ds, delivery{r, msg})
		}
	}
	s.nTables.Add(uint64(len(ds)))
	for p, r := range targets {
		if relayed[p] != nil {
			ds = append(ds, delivery{r, relayed[p]})
		}
	}
	for _, j := range joiners {
		jm, err := encodeMsg(&envelope{Kind: msgJoined, Table: &tbl, Proc: j.proc}, MaxServerMessage)
		if err != nil {
			s.log.Error("rendezvous: cannot encode the member table for a joiner", "proc", j.proc, "err", err)
			j.rw.Close()
			continue
		}
		ds = append(ds, delivery{j, jm})
	}
	s.broadcast(ds)
	return true
}

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

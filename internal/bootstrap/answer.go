package bootstrap

// What an attempt got from the rendezvous, checked against this process:
// an ack, the table (its shape and this process's own entry, and the id a
// joiner was given), or a refusal.

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// onAck: the rendezvous registered this process (a joiner learns its id)
// and the table is to come once every process has registered. From here
// the wait is bounded by ctx only: the other processes may take long to
// start.
func (r *registrar) onAck(ctx context.Context, c net.Conn, m *envelope) error {
	if r.join {
		if err := r.given(m.Proc); err != nil {
			return backoff.Permanent(err)
		}
	}
	r.mu.Lock()
	r.acked = true
	r.mu.Unlock()
	c.SetDeadline(time.Time{})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.log.Debug("bootstrap: registered; waiting for the table", "proc", procAttr(r.presented()))
	return nil
}

// onTable checks the table m (body as it came, for this process's relay)
// and makes it the attempt's result: a process's own table, or a joiner's
// with the id it was given.
func (r *registrar) onTable(rw net.Conn, body []byte, m *envelope) (attemptResult, error) {
	if (m.Kind == msgJoined) != r.join {
		return attemptResult{}, backoff.Permanent(fmt.Errorf("%w: the rendezvous answered a joiner's registration with a process's table, or the other way round (message kind %d); run the same gaspigo build everywhere", ErrProtocol, m.Kind))
	}
	t, id := *m.Table, r.env.Proc
	if r.join {
		id = m.Proc
		if err := r.given(id); err != nil {
			return attemptResult{}, backoff.Permanent(err)
		}
	}
	if err := r.checkTable(t, id); err != nil {
		return attemptResult{}, backoff.Permanent(err)
	}
	return attemptResult{conn: rw, table: t, id: id, frame: framed(body)}, nil
}

// refusal is the error of an answer that ends the registration: a
// rejection of this process (presented as id), the end of the job a
// joiner came to join, or a message out of place.
func (r *registrar) refusal(m *envelope, id uint32) error {
	switch {
	case m.Kind == msgReject:
		return &RejectedError{Proc: id, Reason: m.Reason}
	case m.Kind == msgFinished && r.join:
		return fmt.Errorf("%w: the rendezvous at %s says the job this process came to join has ended", ErrJobFinished, r.env.Rendezvous)
	case m.Kind == msgFinished:
		return fmt.Errorf("%w: the rendezvous said the job finished while this process registered; run the same gaspigo build everywhere", ErrProtocol)
	}
	return fmt.Errorf("%w: unexpected message kind %d while waiting for the table", ErrProtocol, m.Kind)
}

// checkTable checks the table an attempt got, for this process as id.
func (r *registrar) checkTable(t Table, id uint32) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if r.join {
		return r.checkJoinedTable(t, id)
	}
	if len(t.Members) != r.env.NumProcs || t.NumRanks != r.env.NumRanks {
		return fmt.Errorf("%w: table has %d processes and %d ranks, this process expects %d and %d",
			ErrProtocol, len(t.Members), t.NumRanks, r.env.NumProcs, r.env.NumRanks)
	}
	if !sameProcess(t.Members[id], r.self) {
		return fmt.Errorf("%w: the table lists process %d as pid %d at %s, not this process",
			ErrProtocol, id, t.Members[id].Pid, t.Members[id].Addr)
	}
	return nil
}

// checkJoinedTable checks the original table a joiner got with its id:
// the counts it was started with, if any, and an id beyond the table's.
func (r *registrar) checkJoinedTable(t Table, id uint32) error {
	if (r.env.NumProcs != 0 && len(t.Members) != r.env.NumProcs) || (r.env.NumRanks != 0 && t.NumRanks != r.env.NumRanks) {
		return fmt.Errorf("%w: table has %d processes and %d ranks, this joiner expects %d and %d (0: any)",
			ErrProtocol, len(t.Members), t.NumRanks, r.env.NumProcs, r.env.NumRanks)
	}
	if int64(id) < int64(len(t.Members)) {
		return fmt.Errorf("%w: the rendezvous gave this joiner id %d, which belongs to one of the job's first %d processes", ErrProtocol, id, len(t.Members))
	}
	return nil
}

// given records the id the rendezvous gave this joiner: it must be a
// joiner's id, the reserved one if the launcher reserved one, and the same
// in every answer.
func (r *registrar) given(id uint32) error {
	had := r.presented()
	switch {
	case id == 0 || id == JoinerID || id >= MaxProcs || int64(id) < int64(r.env.NumProcs):
		// 0 is no id at all (the field is left out), and never a
		// joiner's: a job has at least one process.
		return fmt.Errorf("%w: the rendezvous gave this joiner id %d, not a joiner's id; run the same gaspigo build everywhere", ErrProtocol, id)
	case had != JoinerID && id != had:
		return fmt.Errorf("%w: this joiner presented id %d (reserved, PGAS_PROC) but the rendezvous gave it %d", ErrProtocol, had, id)
	case had == id:
		return nil
	}
	r.log.Debug("bootstrap: the rendezvous gave this joiner its id", "proc", id)
	return r.present(id)
}

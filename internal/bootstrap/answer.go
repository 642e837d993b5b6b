package bootstrap

// What an attempt got from the rendezvous, checked against this process:
// the table's shape and this process's own entry, and the id a joiner was
// given.

import "fmt"

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

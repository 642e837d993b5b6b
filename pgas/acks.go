package pgas

// The ack/nack protocol of sequenced frames, between two processes. The
// sender numbers the frames it needs acknowledged (writes, notifications,
// goodbyes) per peer; the receiver acknowledges the highest sequence it
// applied, cumulatively, and refuses a sequence it could not apply with an
// error code (a nack). Rules:
//
//   - An ack rides on any frame going back (piggyback) or goes in a
//     FrameAck of its own when the sender asks for one (it waits) or when
//     there are refusals to send.
//   - A refusal reaches the sender before any ack that covers its
//     sequence: no ack is piggybacked while a refusal is queued or being
//     sent, and a flush sends the refusals before the ack.
//   - A refusal of seq also says that everything before seq was applied.
//
// ackIn and ackOut are the two sides as pure state: no locks, no clocks,
// no I/O. A peer holds them under its locks and sends what they say.

// nack is one refused sequence and the error code the target gave.
type nack struct{ seq, code uint64 }

// ackIn is the receiving side for one peer: what this process applied
// from it and what it still owes it.
type ackIn struct {
	applied  uint64 // highest sequence applied from the peer
	ackedOut uint64 // highest sequence acknowledged to it
	nacksOut []nack // refusals not yet taken by a flush
	dirty    bool   // a flush is scheduled
	force    bool   // the peer asked for an ack
	// sending counts refusals taken by a flush and not yet sent; while it
	// is non-zero no ack is piggybacked.
	sending int
}

// apply records that seq was applied. It schedules nothing: the ack rides
// on the next frame back, or answers the peer's request when it waits.
func (a *ackIn) apply(seq uint64) { a.applied = seq }

// refuse records that seq was refused with code. It reports whether a
// flush must be scheduled (none is yet).
func (a *ackIn) refuse(seq, code uint64) (schedule bool) {
	a.nacksOut = append(a.nacksOut, nack{seq, code})
	return a.mark()
}

// request records that the peer asked for the cumulative ack. The answer
// goes out even if an ack was already carried by a frame, since that frame
// may have been cut. It reports whether a flush must be scheduled.
func (a *ackIn) request() (schedule bool) {
	a.force = true
	return a.mark()
}

func (a *ackIn) mark() bool {
	schedule := !a.dirty
	a.dirty = true
	return schedule
}

// piggyback returns the cumulative ack to put on a frame going to the
// peer, 0 for none: nothing applied yet, or a refusal not sent yet.
func (a *ackIn) piggyback() uint64 {
	if len(a.nacksOut) != 0 || a.sending != 0 || a.applied == 0 {
		return 0
	}
	a.ackedOut = max(a.ackedOut, a.applied)
	return a.applied
}

// flush is what one flush sends, in this order: the refusals, then the
// cumulative ack (0: none).
type flush struct {
	nacks []nack
	ack   uint64
}

// take starts a flush. The caller sends what it returns, then calls sent
// with the number of refusals, whether or not the sends succeeded.
func (a *ackIn) take() flush {
	f := flush{nacks: a.nacksOut}
	a.nacksOut = nil
	a.sending += len(f.nacks)
	if a.applied > a.ackedOut || (a.force && a.applied > 0) {
		f.ack = a.applied
	}
	a.ackedOut = max(a.ackedOut, a.applied)
	a.dirty, a.force = false, false
	return f
}

// sent ends a flush of n refusals.
func (a *ackIn) sent(n int) { a.sending -= n }

// ackOut is the sending side for one peer: what the peer acknowledged and
// refused of the frames this process sent it.
type ackOut struct {
	acked uint64            // highest sequence the peer applied
	nacks map[uint64]uint64 // seq -> error code, refusals not yet collected
}

// ack records a cumulative ack; it reports whether anything changed.
func (a *ackOut) ack(seq uint64) (changed bool) {
	if seq <= a.acked {
		return false
	}
	a.acked = seq
	return true
}

// nack records the refusal of seq with code; the peer applied everything
// before seq.
func (a *ackOut) nack(seq, code uint64) {
	if a.nacks == nil {
		a.nacks = make(map[uint64]uint64)
	}
	a.nacks[seq] = code
	a.acked = max(a.acked, seq-1)
}

// outcome tells what became of seq: refused (code, collected once: the
// refusal is forgotten), applied, or not known yet.
func (a *ackOut) outcome(seq uint64) (refused bool, code uint64, applied bool) {
	if code, ok := a.nacks[seq]; ok {
		delete(a.nacks, seq)
		return true, code, false
	}
	return false, 0, a.acked >= seq
}

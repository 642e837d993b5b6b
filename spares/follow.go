package spares

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/gaspigo/gaspigo/spares/internal/tree"
	"github.com/gaspigo/gaspigo/spares/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// The tree's news (Config.VotersOnly). A client keeps one control
// connection to the process above it in the tree (its parent, or while
// that one does not answer the next one up, then a voter) and asks on it,
// again and again, for what is newer than its version:
//
//	request  [ctlVersion, ctlOpFollow, payload [have, full]]
//	answer   [code, version, leader, fresh, age µs, state bytes, [[index, command bytes]...]]
//
// The parent answers at once when it holds a newer version, else after
// Config.TreeHold with nothing new (a keepalive). Every answer carries the
// leader the parent knows of and how long ago the parent itself last had
// contact with the membership's quorum (fresh false: never), so the
// child's contact is its ancestors' contact, however deep it is. A news
// that reaches a parent goes down at once: a change reaches every process
// in depth (log_k N) hops.

const ctlOpFollow = 3

// maxFollowFrame caps an answer: a whole state and the changes kept.
const maxFollowFrame = maxStateSize + maxNews*(maxCommandSize+32) + 1024

func encodeFollowRequest(have uint64, full bool) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	if err := wire.EncAll(e.EncodeArrayLen(2), e.EncodeUint(have), e.EncodeBool(full)); err != nil {
		return nil, err
	}
	return encodeCtlRequest(ctlOpFollow, buf.Bytes())
}

func decodeFollowRequest(payload []byte) (have uint64, full bool, err error) {
	d := wire.NewDec(payload, errProtocol)
	if n := d.ArrayLen(2); d.Err() == nil && n != 2 {
		return 0, false, fmt.Errorf("%w: follow request has %d fields, want 2", errProtocol, n)
	}
	have = d.Uint(^uint64(0))
	full = d.Bool()
	return have, full, d.Finish()
}

// followAnswer is a parent's answer.
type followAnswer struct {
	Code   string
	Update update
	Leader uint32
	Fresh  bool          // the parent had contact with the quorum once
	Age    time.Duration // how long ago it last had
}

func encodeFollowAnswer(a followAnswer) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	state := a.Update.State
	if state == nil {
		state = []byte{}
	}
	err := wire.EncAll(e.EncodeArrayLen(7), e.EncodeString(a.Code), e.EncodeUint(a.Update.Version), e.EncodeUint(uint64(a.Leader)),
		e.EncodeBool(a.Fresh), e.EncodeUint(uint64(max(a.Age, 0)/time.Microsecond)), e.EncodeBytes(state), e.EncodeArrayLen(len(a.Update.Entries)))
	for _, en := range a.Update.Entries {
		if err != nil {
			break
		}
		err = wire.EncAll(e.EncodeArrayLen(2), e.EncodeUint(en.Index), e.EncodeBytes(en.Data))
	}
	return buf.Bytes(), err
}

func decodeFollowAnswer(b []byte) (followAnswer, error) {
	var a followAnswer
	d := wire.NewDec(b, errProtocol)
	if n := d.ArrayLen(7); d.Err() == nil && n != 7 {
		return a, fmt.Errorf("%w: follow answer has %d fields, want 7", errProtocol, n)
	}
	a.Code = d.Str(64)
	a.Update.Version = d.Uint(^uint64(0))
	a.Leader = uint32(d.Uint(uint64(noProc)))
	a.Fresh = d.Bool()
	a.Age = time.Duration(d.Uint(uint64(1<<62/time.Microsecond))) * time.Microsecond
	if st := d.Bin(maxStateSize); len(st) > 0 {
		a.Update.State = st
	}
	n := d.ArrayLen(maxNews)
	last := uint64(0)
	for i := 0; i < n && d.Err() == nil; i++ {
		if m := d.ArrayLen(2); d.Err() == nil && m != 2 {
			return a, fmt.Errorf("%w: follow entry has %d fields, want 2", errProtocol, m)
		}
		en := newsEntry{Index: d.Uint(^uint64(0)), Data: d.Bin(maxCommandSize)}
		if d.Err() == nil && (en.Index <= last || en.Index > a.Update.Version) {
			return a, fmt.Errorf("%w: follow entry index %d after %d, version %d", errProtocol, en.Index, last, a.Update.Version)
		}
		last = en.Index
		a.Update.Entries = append(a.Update.Entries, en)
	}
	return a, d.Finish()
}

// following reports whether this node learns its state from the tree: a
// client, or a promoted voter whose Raft has not received anything yet.
func (n *Node) following() bool {
	r := n.raftNode()
	return r == nil || r.LastIndex() == 0
}

// followLoop is owned by a node of the voters-only mode while it learns
// its state from the tree. It asks the first process of its upstream
// list that has not failed it lately, starts Raft when the state makes
// this process a voter, and ends once Raft feeds the state.
func (n *Node) followLoop() {
	bad := map[uint32]time.Time{} // upstream processes that failed us, until when to skip them
	badFor := 2 * n.cfg.treeHold()
	full := false
	failed := false // the last attempt failed
	for !n.isClosed() {
		n.maybeStartRaft()
		if !n.following() {
			return
		}
		tr, changed := n.fsm.tree(n.cfg.TreeFanout)
		now := time.Now()
		n.down.addTo(bad, now)
		// Right after a failure no mark runs out: a dial to a silent host
		// fails only at its time-out (RPCTimeout, longer than badFor), and
		// two such hosts first in the list would otherwise take turns for
		// ever and keep this process from the live ones after them.
		target, fallback := tree.Pick(n.upstream(tr), bad, now, !failed)
		if target == noProc || fallback {
			// Nobody to ask, or everybody failed us lately: wait a little.
			t := time.NewTimer(n.cfg.treeHold() / 4)
			select {
			case <-t.C:
			case <-changed:
				t.Stop()
			case <-n.closeCh:
				t.Stop()
				return
			}
			if target == noProc {
				continue
			}
		}
		err := n.followFrom(target, &full, bad)
		failed = err != nil
		if failed {
			if until := time.Now().Add(badFor); until.After(bad[target]) {
				bad[target] = until
			}
			n.log.Debug("spares: tree parent did not answer; asking the next one up", "parent", target, "err", err)
		}
	}
}

// upstream is whom this node asks for news, best first (Tree.Upstream).
// A joiner its state does not list yet (joining) knows only the voters of
// the job's first state, and all of them may have been replaced since:
// after them it asks the other processes of its state in tree order, any
// of which answers with the news. That list is O(N), built per answer,
// but only until the joiner's state lists it.
func (n *Node) upstream(tr *tree.Tree) []uint32 {
	up := tr.Upstream(n.cfg.Proc)
	joining := false
	var later []uint32
	n.fsm.read(func(st *state, _ uint64) {
		if joining = n.joining(st); joining {
			later = n.unlistedContacts(st)
		}
	})
	if !joining {
		return up
	}
	// The voters of the first state, then those who joined before this
	// process (Config.Contacts: the likeliest to be alive when the first
	// processes are gone), then the others of the first state.
	up = append(up, later...)
	return append(up, tr.Clients()...)
}

// followFrom follows target on one connection until it fails, this node
// stops following, or target is no longer the one to ask.
func (n *Node) followFrom(target uint32, full *bool, bad map[uint32]time.Time) error {
	var addr string
	n.fsm.read(func(st *state, _ uint64) { addr = n.ctlAddrOf(st, target) })
	if addr == "" {
		return fmt.Errorf("%w: proc %d has no control address", errProtocol, target)
	}
	ctx, cancel := context.WithCancel(n.ctx)
	defer cancel()
	// This process's failure detector confirming target failed ends the
	// attempt at once, dial or held request, instead of at its deadline.
	stopDown := n.down.onMark(target, cancel)
	defer stopDown()
	c, err := n.dialCtl(ctx, addr)
	if err != nil && ctx.Err() != nil && n.ctx.Err() == nil {
		return fmt.Errorf("spares: proc %d was confirmed failed: %w", target, err)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	stale := 0 // answers in a row from a parent out of contact
	for {
		req, err := encodeFollowRequest(n.fsm.version(), *full)
		if err != nil {
			return err
		}
		_ = c.SetDeadline(time.Now().Add(n.cfg.treeHold() + n.cfg.RPCTimeout))
		// The deadline just set replaces the past one that ending ctx
		// sets (stop, above): an end that came before must be seen here,
		// or a Shutdown would wait for this loop, which the parent keeps
		// answering, until its bound.
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := writeFrame(c, req); err != nil {
			return err
		}
		body, err := readFrameMax(c, maxFollowFrame)
		if err != nil {
			return err
		}
		got := time.Now()
		a, err := decodeFollowAnswer(body)
		if err != nil {
			return err
		}
		if a.Code != codeOK {
			return fmt.Errorf("spares: proc %d: follow answer %q", c.peer, a.Code)
		}
		n.heard.Record(a.Leader, a.Fresh, a.Age, got)
		if !n.following() {
			return nil
		}
		// A parent that answers but has itself lost the quorum for more
		// than a whole hold (cut off from its own upstream) cannot pass
		// news on: ask the next one up.
		if !a.Fresh || a.Age > treeFresh(&n.cfg) {
			stale++
		} else {
			stale = 0
		}
		if stale >= 2 {
			return fmt.Errorf("spares: proc %d answers but is out of contact with the quorum (last contact %v ago)", c.peer, a.Age)
		}
		*full = false
		if err := n.fsm.applyUpdate(a.Update); err != nil {
			n.log.Warn("spares: news from the tree does not apply; asking for the whole state", "parent", c.peer, "err", err)
			*full = true
		}
		start := false
		n.fsm.read(func(st *state, _ uint64) { start = n.shouldStartRaft(st) })
		if start {
			return nil
		}
		tr, _ := n.fsm.tree(n.cfg.TreeFanout)
		now := time.Now()
		n.down.addTo(bad, now)
		if p, _ := tree.Pick(n.upstream(tr), bad, now, true); p != target {
			return nil // the tree moved, or a closer ancestor may answer again
		}
	}
}

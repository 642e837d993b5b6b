package spares

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/spares/internal/follow"
	"github.com/gaspigo/gaspigo/spares/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// Control RPC: one request per connection, after the job-token handshake
// (purpose "ctrl"). Frames are a 4-byte big-endian length and a msgpack
// body of at most maxCtlFrame bytes.
//
//	request   [ctlVersion, op, payload bytes]
//	response to ctlOpPropose (payload: a command)
//	          [code, message, leader, changed, epoch, rank+1, promoted, status, note]
//	response to ctlOpStanding (payload: empty)
//	          [code, message, epoch, status, reason, failed-in epoch, rank+1, known]
//	ctlOpFollow: the tree's news, many requests on one connection
//	          (spares/internal/follow)
//	response to ctlOpLead (payload: the target proc, 4 bytes big-endian)
//	          as to ctlOpPropose, with an empty result (lead.go)
//
// code is "ok" or one of the codes of errorCodes (or "internal"); leader is
// the proc the responder believes leads (noProc if none). A standing answer
// describes the asking process (the proc its handshake proved) in the
// responder's applied state.
const (
	maxCtlFrame   = maxCommandSize + 1024
	ctlVersion    = 1
	ctlOpPropose  = 1
	ctlOpStanding = 2
	ctlOpFollow   = follow.Op
	codeOK        = wire.CodeOK
)

// followLimits bound an answer of the tree's news; maxFollowFrame, the
// largest frame, caps one.
var (
	followLimits   = follow.Limits{State: maxStateSize, Command: maxCommandSize, Entries: maxNews}
	maxFollowFrame = followLimits.Frame()
)

// writeFrame writes body as one frame of at most the largest (an answer
// of the tree's news).
func writeFrame(w io.Writer, body []byte) error { return wire.WriteFrame(w, body, maxFollowFrame) }

func readFrame(r io.Reader) ([]byte, error) { return wire.ReadFrame(r, maxCtlFrame) }

func encodeCtlRequest(op uint64, payload []byte) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	err := wire.EncAll(e.EncodeArrayLen(3), e.EncodeUint(ctlVersion), e.EncodeUint(op), e.EncodeBytes(payload))
	return buf.Bytes(), err
}

func decodeCtlRequest(b []byte) (op uint64, payload []byte, err error) {
	d := wire.NewDec(b, errProtocol)
	if n := d.ArrayLen(3); d.Err() == nil && n != 3 {
		return 0, nil, fmt.Errorf("%w: request has %d fields, want 3", errProtocol, n)
	}
	if v := d.Uint(255); d.Err() == nil && v != ctlVersion {
		return 0, nil, fmt.Errorf("%w: request version %d, this build speaks %d", errProtocol, v, ctlVersion)
	}
	op = d.Uint(255)
	if d.Err() == nil && op != ctlOpPropose && op != ctlOpStanding && op != ctlOpFollow && op != ctlOpLead {
		return 0, nil, fmt.Errorf("%w: unknown request op %d", errProtocol, op)
	}
	payload = d.Bin(maxCommandSize)
	if d.Err() == nil && op == ctlOpStanding && len(payload) != 0 {
		return 0, nil, fmt.Errorf("%w: standing request with a %d-byte payload, want none", errProtocol, len(payload))
	}
	if d.Err() == nil && op == ctlOpLead && len(payload) != 4 {
		return 0, nil, fmt.Errorf("%w: leadership request with a %d-byte payload, want 4", errProtocol, len(payload))
	}
	return op, payload, d.Finish()
}

type ctlResponse struct {
	Code   string
	Msg    string
	Leader uint32
	Result result
}

func encodeCtlResponse(r ctlResponse) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	if len(r.Msg) > 1024 {
		r.Msg = r.Msg[:1024]
	}
	if len(r.Result.Note) > 1024 {
		r.Result.Note = r.Result.Note[:1024]
	}
	rank := uint64(0)
	if r.Result.Rank >= 0 {
		rank = uint64(r.Result.Rank) + 1
	}
	err := wire.EncAll(e.EncodeArrayLen(9), e.EncodeString(r.Code), e.EncodeString(r.Msg), e.EncodeUint(uint64(r.Leader)),
		e.EncodeBool(r.Result.Changed), e.EncodeUint(r.Result.Epoch), e.EncodeUint(rank), e.EncodeUint(uint64(r.Result.Promoted)),
		e.EncodeUint(uint64(r.Result.Status)), e.EncodeString(r.Result.Note))
	return buf.Bytes(), err
}

func decodeCtlResponse(b []byte) (ctlResponse, error) {
	var r ctlResponse
	d := wire.NewDec(b, errProtocol)
	if n := d.ArrayLen(9); d.Err() == nil && n != 9 {
		return r, fmt.Errorf("%w: response has %d fields, want 9", errProtocol, n)
	}
	r.Code = d.Str(64)
	r.Msg = d.Str(1024)
	r.Leader = uint32(d.Uint(uint64(noProc)))
	r.Result.Changed = d.Bool()
	r.Result.Epoch = d.Uint(^uint64(0))
	r.Result.Rank = int(d.Uint(maxProcs+1)) - 1
	r.Result.Promoted = uint32(d.Uint(uint64(noProc)))
	r.Result.Status = jobStatus(d.Uint(uint64(statusFailed)))
	r.Result.Note = d.Str(1024)
	return r, d.Finish()
}

// serveCtl answers one control connection in a goroutine of the node's,
// once the node has started (New).
func (n *Node) serveCtl(c *authConn) {
	if !n.goFunc(func() {
		select {
		case <-n.started:
		case <-n.ctx.Done():
			c.Close()
			return
		}
		n.handleCtl(c)
	}) {
		c.Close()
	}
}

func (n *Node) handleCtl(c *authConn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.RPCTimeout)
	defer cancel()
	_ = c.SetDeadline(time.Now().Add(n.cfg.RPCTimeout))
	resp := ctlResponse{Code: codeOK, Leader: noProc}
	req, err := readFrame(c)
	var (
		op  uint64
		cmd []byte
	)
	if err == nil {
		op, cmd, err = decodeCtlRequest(req)
	}
	if err == nil && op == ctlOpStanding {
		n.answerStanding(c)
		return
	}
	if err == nil && op == ctlOpFollow {
		n.follow.Serve(c, cmd)
		return
	}
	if err != nil {
		if gone(err) {
			// The peer closed before it asked: a proposal it gave up,
			// or a process leaving at the job's end. Nothing was bad.
			n.log.Debug("spares: control connection closed before a request", "peer", c.peer, "err", err)
			return
		}
		n.log.Warn("spares: bad control request", "peer", c.peer, "err", err)
		resp.Code, resp.Msg = "bad-command", err.Error()
	} else if op == ctlOpLead {
		if err := n.leadLocal(binary.BigEndian.Uint32(cmd)); err != nil {
			resp.Code, resp.Msg = codeOf(err), err.Error()
		}
	} else {
		res, err := n.applyLocal(ctx, cmd)
		if err != nil {
			resp.Code, resp.Msg = codeOf(err), err.Error()
		}
		resp.Result = res
	}
	if p, ok := n.leader(); ok {
		resp.Leader = p
	}
	body, err := encodeCtlResponse(resp)
	if err == nil {
		err = writeFrame(c, body)
	}
	if err != nil {
		n.log.Debug("spares: control reply failed", "peer", c.peer, "err", err)
	}
}

// callCtl sends one proposal to the control RPC at addr.
func (n *Node) callCtl(ctx context.Context, addr string, token []byte, cmd []byte) (result, error) {
	res, _, err := n.callCtlOp(ctx, addr, token, ctlOpPropose, cmd)
	return res, err
}

// callCtlOp sends one request of op (ctlOpPropose or ctlOpLead) to the
// control RPC at addr; on success it also returns the leader the answer
// named (noProc: none).
func (n *Node) callCtlOp(ctx context.Context, addr string, token []byte, op uint64, payload []byte) (result, uint32, error) {
	var c *authConn
	var err error
	if n.cfg.Network != nil {
		c, err = n.dialCtl(ctx, addr)
	} else {
		c, err = dialAuth(ctx, addr, token, n.cfg.TLS, auth.PurposeControl, n.cfg.Proc, n.cfg.RPCTimeout, n.cfg.WrapConn)
	}
	if err != nil {
		return result{}, noProc, err
	}
	defer c.Close()
	deadline := time.Now().Add(n.cfg.RPCTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req, err := encodeCtlRequest(op, payload)
	if err != nil {
		return result{}, noProc, err
	}
	if err := writeFrame(c, req); err != nil {
		return result{}, noProc, fmt.Errorf("spares: control request to %s: %w", addr, err)
	}
	body, err := readFrame(c)
	if err != nil {
		return result{}, noProc, fmt.Errorf("spares: control reply from %s: %w", addr, err)
	}
	resp, err := decodeCtlResponse(body)
	if err != nil {
		return result{}, noProc, err
	}
	if resp.Code == codeOK {
		return resp.Result, resp.Leader, nil
	}
	if sentinel := errOfCode(resp.Code); sentinel != nil {
		return result{}, noProc, &remoteError{Proc: c.peer, Code: resp.Code, Msg: resp.Msg, Leader: resp.Leader, err: sentinel}
	}
	return result{}, noProc, &remoteError{Proc: c.peer, Code: resp.Code, Msg: resp.Msg, Leader: resp.Leader, err: errors.New(resp.Msg)}
}

// remoteError is an error reported by another process over the control
// RPC; it unwraps to the same sentinel the remote call returned.
type remoteError struct {
	Proc   uint32 // the process that answered
	Code   string
	Msg    string
	Leader uint32 // the leader it knows of, noProc if none
	err    error
}

func (e *remoteError) Error() string {
	return fmt.Sprintf("spares: proc %d: %s", e.Proc, e.Msg)
}

func (e *remoteError) Unwrap() error { return e.err }

// gone reports whether err is a connection the peer closed or reset, or
// one this process closed, rather than a malformed request.
func gone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET)
}

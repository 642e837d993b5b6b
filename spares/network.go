package spares

import (
	"context"
	"net"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/hashicorp/raft"
)

// Network carries a Node's traffic: the Raft transport and the control
// connections (proposals, standing questions, the tree's news). nil in
// Config.Network means TCP with the job-token handshake (Config.Token,
// RaftListener, CtlListener, WrapConn); MemNetwork runs thousands of nodes
// in one process.
type Network interface {
	// RaftTransport returns the Raft transport of proc, reachable by the
	// others at addr. The node calls it when it starts Raft (at once for a
	// voter, on promotion for a client) and Raft closes it on shutdown.
	RaftTransport(proc uint32, addr string) (raft.Transport, error)
	// ListenCtl listens for control connections to proc at addr. Every
	// accepted connection must implement PeerConn. The node closes it.
	ListenCtl(proc uint32, addr string) (net.Listener, error)
	// DialCtl connects proc from to the control listener at addr and
	// returns the connection and the proc that listens there.
	DialCtl(ctx context.Context, from uint32, addr string) (net.Conn, uint32, error)
}

// PeerConn is an accepted control connection that knows its peer's
// process (proved by the job-token handshake over TCP).
type PeerConn interface {
	net.Conn
	Peer() uint32
}

// Peer is the process at the other end.
func (c *authConn) Peer() uint32 { return c.peer }

// listenCtl makes the node's control listener: the network's, or TCP
// with the handshake.
func (n *Node) listenCtl() (net.Listener, error) {
	if nw := n.cfg.Network; nw != nil {
		return nw.ListenCtl(n.cfg.Proc, n.self.CtlAddr)
	}
	ln := n.cfg.CtlListener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", n.self.CtlAddr); err != nil {
			return nil, err
		}
	}
	n.ctlAuth = newAuthListener(ln, n.cfg.Token, n.cfg.TLS, auth.PurposeControl, n.cfg.Proc, n.cfg.HandshakeTimeout, n.log)
	return n.ctlAuth, nil
}

// dialCtl opens a control connection to addr under ctx (and at most
// RPCTimeout for the handshake).
func (n *Node) dialCtl(ctx context.Context, addr string) (*authConn, error) {
	if nw := n.cfg.Network; nw != nil {
		c, peer, err := nw.DialCtl(ctx, n.cfg.Proc, addr)
		if err != nil {
			return nil, err
		}
		return &authConn{Conn: c, peer: peer}, nil
	}
	return dialAuth(ctx, addr, n.cfg.Token, n.cfg.TLS, auth.PurposeControl, n.cfg.Proc, n.cfg.RPCTimeout, n.cfg.WrapConn)
}

// asPeerConn gives an accepted connection the shape the handlers use.
func asPeerConn(c net.Conn) *authConn {
	switch pc := c.(type) {
	case *authConn:
		return pc
	case PeerConn:
		return &authConn{Conn: pc, peer: pc.Peer()}
	}
	return &authConn{Conn: c, peer: NoProc}
}

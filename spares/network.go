package spares

import (
	"context"
	"io"
	"net"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/hashicorp/raft"
)

// Network carries a Node's traffic: the Raft transport and the control
// connections (proposals, standing questions, the tree's news). nil in
// Config.Network means TCP with the job-token handshake (Config.Token,
// RaftListener, CtlListener, WrapConn); internal/testkit/memnet runs
// thousands of nodes in one process.
type Network interface {
	// RaftTransport returns the Raft transport of proc, reachable by the
	// others at addr. The node calls it when it starts Raft (at once for a
	// voter, on promotion for a client) and Raft closes it on shutdown.
	RaftTransport(proc uint32, addr string) (raft.Transport, error)
	// ServeCtl takes control connections to proc at addr and gives each
	// to serve with the process at its other end, and serve starts its
	// handler and returns at once. Closing the returned Closer stops it
	// and closes the connections it gave out.
	ServeCtl(proc uint32, addr string, serve func(c net.Conn, peer uint32)) (io.Closer, error)
	// DialCtl connects proc from to the control listener at addr and
	// returns the connection and the proc that listens there.
	DialCtl(ctx context.Context, from uint32, addr string) (net.Conn, uint32, error)
}

// listenCtl starts taking the node's control connections: over the
// network's, or over TCP with the handshake (internal/listen).
func (n *Node) listenCtl() (io.Closer, error) {
	if nw := n.cfg.Network; nw != nil {
		return nw.ServeCtl(n.cfg.Proc, n.self.CtlAddr, func(c net.Conn, peer uint32) { n.serveCtl(&authConn{Conn: c, peer: peer}) })
	}
	ln := n.cfg.CtlListener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", n.self.CtlAddr); err != nil {
			return nil, err
		}
	}
	l, err := newAuthListener(ln, n.cfg.Token, n.cfg.TLS, auth.PurposeControl, n.cfg.Proc, n.cfg.HandshakeTimeout, len(n.cfg.Members), n.log, n.serveCtl)
	if err != nil {
		return nil, err
	}
	n.ctlAuth = l
	return l, nil
}

// dialCtl opens a control connection to addr under ctx, in at most
// RPCTimeout (dial and handshake).
func (n *Node) dialCtl(ctx context.Context, addr string) (*authConn, error) {
	if nw := n.cfg.Network; nw != nil {
		dctx, cancel := context.WithTimeout(ctx, n.cfg.RPCTimeout)
		defer cancel()
		c, peer, err := nw.DialCtl(dctx, n.cfg.Proc, addr)
		if err != nil {
			return nil, err
		}
		return &authConn{Conn: c, peer: peer}, nil
	}
	return dialAuth(ctx, addr, n.cfg.Token, n.cfg.TLS, auth.PurposeControl, n.cfg.Proc, n.cfg.RPCTimeout, n.cfg.WrapConn)
}

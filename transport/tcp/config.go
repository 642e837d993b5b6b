package tcp

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
)

// Config configures a Transport. Start from DefaultConfig or LocalConfig,
// then set Self and Token.
type Config struct {
	// Self is this process's ID. Required; NoProc is not allowed.
	Self transport.Proc

	// Listener is an already bound listener to accept peers on, for a
	// launcher that reserves ports before it starts processes. The
	// Transport owns it once New succeeds and closes it in Close. When
	// nil, New binds ListenAddr.
	Listener net.Listener
	// ListenAddr is the host:port to bind when Listener is nil, e.g.
	// "127.0.0.1:0" (port 0 picks a free port; Addr reports it). Ignored
	// when Listener is set.
	ListenAddr string

	// Token is the job token (see internal/auth.NewToken). Every connection
	// proves knowledge of it before any frame is read. At least 16 bytes.
	Token []byte

	// TLS runs mutual TLS 1.3 over every connection once its token
	// handshake succeeds, with a key derived from Token (PGAS_TLS; see
	// internal/auth). Every process of a job must agree: a peer that
	// disagrees is refused during the handshake, with an error saying so.
	// PollSpin does not apply under TLS.
	TLS bool

	// HandshakeTimeout bounds the authentication of one connection, dial or
	// accept, so that a silent client cannot hold a goroutine. Must be > 0.
	HandshakeTimeout time.Duration

	// DialTimeout bounds one TCP connect attempt. Must be > 0.
	DialTimeout time.Duration
	// DialInitialInterval is the first pause between dial attempts; it grows
	// exponentially (with jitter) up to DialMaxInterval. A dial is retried
	// when its connect times out, its handshake fails, or the peer's own
	// dial crossed it and is still on its way. Must be > 0.
	DialInitialInterval time.Duration
	// DialMaxInterval caps the pause between dial attempts. Must be >=
	// DialInitialInterval.
	DialMaxInterval time.Duration
	// DialMaxElapsed is how long the dialer keeps retrying a peer before it
	// declares the peer down (Handler.PeerDown). Three connects refused in
	// a row end it sooner: every listener is bound before its address is
	// published, so nothing listening means the process is gone. Must be
	// >= DialInitialInterval.
	DialMaxElapsed time.Duration

	// ReadBufferSize is the size in bytes of each connection's read buffer.
	// Payloads at least this large are read from the socket straight into
	// the handler's destination; smaller ones pass through the buffer, which
	// batches small frames into few system calls. 4 KiB..64 MiB.
	ReadBufferSize int

	// SocketReadBuffer and SocketWriteBuffer set SO_RCVBUF and SO_SNDBUF in
	// bytes. 0 keeps the operating system's default, which on Linux
	// auto-tunes and is usually best. Must be >= 0.
	SocketReadBuffer  int
	SocketWriteBuffer int

	// KeepAlive is the TCP keep-alive period: 0 uses Go's default (15 s),
	// a negative value disables keep-alives. It lets a connection to a
	// vanished host fail even when nothing is being sent.
	KeepAlive time.Duration

	// WrapConn, when set, wraps every connection this transport dials,
	// before its handshake (internal/netfault uses it to inject network
	// faults; wrap Listener for the accepted ones). A wrapped connection
	// gets the socket options through its NetConn method, if it has one.
	WrapConn func(net.Conn) net.Conn

	// PollSpin, when > 0, makes each connection's reader poll the socket
	// with non-blocking reads for up to this long after its last frame
	// before it parks in the network poller. It trades CPU for
	// small-message latency; keep it 0 on oversubscribed hosts (package
	// job chooses it: PGAS_TCP_SPIN). SetPollSpin changes it for the
	// connections made afterwards. 0..10ms.
	PollSpin time.Duration
	// BatchFrame is the largest frame, header included, in bytes, that
	// Send never blocks on: when the connection is idle the caller writes
	// it, with what is queued, by one non-blocking write (what the socket
	// does not take goes to the connection's writer); when a write is in
	// progress its bytes are copied to the connection's batch and Send
	// returns at once, and the connection's writer puts everything queued
	// on the wire with one system call. A stream of small writes,
	// notifications and acknowledgements thus costs one system call per
	// batch, not per frame. 0 disables batching (every Send writes its
	// frame itself, as larger ones always do); otherwise
	// transport.HeaderSize..BatchBytes.
	BatchFrame int
	// BatchBytes caps the bytes queued on one connection. A Send that
	// would go over it writes the batch and its own frame itself, bounded
	// by its ctx, so a peer that stops reading holds at most this much
	// here. At most 64 MiB.
	BatchBytes int
	// Linger is how long a small frame sent with SendLater may wait in the
	// batch for a frame that must leave now (Send, Queue) before the
	// connection's writer takes it anyway: a window of writes then leaves
	// with the Wait's request for their acknowledgement, in one system
	// call, where writing each at once would cost a system call per
	// frame. 0 makes SendLater a Send; 0..10ms.
	Linger time.Duration

	// IdleTimeout closes a connection that carried no frame either way
	// for this long (at most half as long again): both ends agree on it
	// with a close handshake (see the package doc), neither counts it as
	// a failure, and the next Send to the peer dials it again. 0 keeps
	// every connection open until the peer fails or Close; must be >= 0.
	IdleTimeout time.Duration

	// Logger receives refusals, connection failures and dial progress, with
	// self, peer and remote attributes. nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns settings for a job spread over hosts: it listens on
// every interface and keeps retrying dials for a minute.
func DefaultConfig() Config {
	return Config{
		Self:                transport.NoProc,
		ListenAddr:          ":0",
		HandshakeTimeout:    5 * time.Second,
		DialTimeout:         5 * time.Second,
		DialInitialInterval: 50 * time.Millisecond,
		DialMaxInterval:     2 * time.Second,
		DialMaxElapsed:      time.Minute,
		ReadBufferSize:      64 << 10,
		BatchFrame:          4 << 10,
		BatchBytes:          256 << 10,
		Linger:              DefaultLinger,
		IdleTimeout:         DefaultIdleTimeout,
	}
}

// DefaultLinger is DefaultConfig's Linger: longer than a window of small
// writes takes to post (64 take about 20 µs), short against the round
// trip that a program polling its memory for such a write pays anyway.
const DefaultLinger = 50 * time.Microsecond

// DefaultIdleTimeout is DefaultConfig's IdleTimeout: a process keeps the
// connections to the peers it works with (its collective and heartbeat
// partners, its mirrors talk every iteration), while one made for a
// start-up exchange, a restore or a single read is closed two minutes
// after its last frame.
const DefaultIdleTimeout = 2 * time.Minute

// LocalConfig returns settings for processes on one host and for tests: it
// listens on loopback and gives up on a peer sooner.
func LocalConfig() Config {
	c := DefaultConfig()
	c.ListenAddr = "127.0.0.1:0"
	c.HandshakeTimeout = 3 * time.Second
	c.DialTimeout = 2 * time.Second
	c.DialInitialInterval = 10 * time.Millisecond
	c.DialMaxInterval = 500 * time.Millisecond
	c.DialMaxElapsed = 20 * time.Second
	return c
}

const (
	minReadBuffer = 4 << 10
	maxPollSpin   = 10 * time.Millisecond
)

// Validate reports every field that is out of range, naming the values. It
// does not change c.
func (c *Config) Validate() error {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if c.Self == transport.NoProc {
		add("Self is NoProc; set it to this process's ID")
	}
	if c.Listener == nil {
		if c.ListenAddr == "" {
			add("neither Listener nor ListenAddr is set; use e.g. ListenAddr \"127.0.0.1:0\"")
		} else if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
			add("ListenAddr %q is not host:port (%v)", c.ListenAddr, err)
		}
	}
	if why := auth.TokenWeakness(c.Token); why != "" {
		add("Token is weak: %s (%s)", why, auth.TokenAdvice)
	}
	if c.HandshakeTimeout <= 0 {
		add("HandshakeTimeout %v must be > 0", c.HandshakeTimeout)
	}
	if c.DialTimeout <= 0 {
		add("DialTimeout %v must be > 0", c.DialTimeout)
	}
	if c.DialInitialInterval <= 0 {
		add("DialInitialInterval %v must be > 0", c.DialInitialInterval)
	}
	if c.DialMaxInterval < c.DialInitialInterval {
		add("DialMaxInterval %v is below DialInitialInterval %v", c.DialMaxInterval, c.DialInitialInterval)
	}
	if c.DialMaxElapsed < c.DialInitialInterval {
		add("DialMaxElapsed %v is below DialInitialInterval %v", c.DialMaxElapsed, c.DialInitialInterval)
	}
	if c.ReadBufferSize < minReadBuffer || c.ReadBufferSize > transport.MaxPayload {
		add("ReadBufferSize %d outside %d..%d bytes", c.ReadBufferSize, minReadBuffer, transport.MaxPayload)
	}
	if c.SocketReadBuffer < 0 {
		add("SocketReadBuffer %d must be >= 0 (0 keeps the OS default)", c.SocketReadBuffer)
	}
	if c.SocketWriteBuffer < 0 {
		add("SocketWriteBuffer %d must be >= 0 (0 keeps the OS default)", c.SocketWriteBuffer)
	}
	if c.PollSpin < 0 || c.PollSpin > maxPollSpin {
		add("PollSpin %v outside 0..%v", c.PollSpin, maxPollSpin)
	}
	if c.BatchFrame != 0 && (c.BatchFrame < transport.HeaderSize || c.BatchFrame > c.BatchBytes) {
		add("BatchFrame %d outside %d..BatchBytes (%d); 0 disables batching", c.BatchFrame, transport.HeaderSize, c.BatchBytes)
	}
	if c.BatchBytes < 0 || c.BatchBytes > transport.MaxPayload {
		add("BatchBytes %d outside 0..%d", c.BatchBytes, transport.MaxPayload)
	}
	if c.Linger < 0 || c.Linger > maxPollSpin {
		add("Linger %v outside 0..%v", c.Linger, maxPollSpin)
	}
	if c.IdleTimeout < 0 {
		add("IdleTimeout %v must be >= 0 (0 never closes an idle connection)", c.IdleTimeout)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(bad, "; "))
	}
	return nil
}

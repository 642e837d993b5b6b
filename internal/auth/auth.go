// Package auth authenticates connections between the processes of one job.
//
// Every job has a random token, known to its processes only. Before any
// frame is accepted, both ends of a connection prove that they know it:
// each sends a hello (magic, purpose, its own ID and a fresh 32-byte nonce),
// then an HMAC-SHA256 keyed with the token over both hellos and its role:
// the dialer first, the acceptor only once it has checked the dialer's.
// Neither the token nor anything replayable crosses the wire, a stray client
// fails at the magic, and a process of another job fails at the MAC.
//
// # TLS
//
// The handshake authenticates a connection; it does not protect what
// follows. For jobs whose traffic crosses networks that others can read or
// write (clusters in a cloud, Kubernetes), Dial and Serve can run mutual TLS
// over the connection once the handshake has succeeded (PGAS_TLS=1,
// gaspirun --tls). Every process derives the same Ed25519 key pair from the
// job token (HKDF-SHA256 with the fixed label tlsKeyLabel) and a
// self-signed certificate for it; both ends present it, and each end
// accepts the other's certificate only when its public key is that derived
// key (TLSConfig: pinned, with no host names, certificate authorities or
// dates involved). Only TLS 1.3 is offered, so the session keys come from
// an ephemeral key exchange: a recording of the traffic stays unreadable
// even to someone who learns the token later. A relay that merely forwards
// the handshake sees ciphertext; a relay that wants to read or change the
// traffic needs the derived private key, hence the token.
//
// TLS runs after the token handshake, not before it, for three reasons.
// The handshake costs an unauthenticated client one HMAC and a few hundred
// bytes, where a TLS handshake costs the listener asymmetric cryptography:
// running it first would let anyone without the token spend the
// listener's CPU. The admission gate (internal/admit) and its hooks keep
// working unchanged on the clear-text hello. And a process whose TLS
// setting differs from its peer's is told so at once: each hello carries
// a "TLS follows" mark (the last byte of its purpose), covered by the MAC
// so that a relay cannot strip it, and a mismatch fails the handshake on
// both ends with ErrTLS naming PGAS_TLS, before either end waits for a TLS
// record that will never come. The hello's nonces and ids travel in the
// clear either way; they are not secret.
//
// The returned Conn closes its socket without TLS's close_notify alert
// (which could block on a peer that does not read); the job's protocols
// delimit their own messages, so an end of stream is never taken for data.
package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// TokenSize is the size of a job token in bytes.
const TokenSize = 32

// MinTokenSize is the shortest token CheckToken accepts, in bytes.
const MinTokenSize = 16

var (
	// ErrAuth is returned when the peer is not of this job: a wrong token, a
	// wrong purpose, or a client that does not speak the protocol.
	ErrAuth = errors.New("auth: peer failed the job-token handshake")
	// ErrToken is returned by ParseToken for malformed tokens.
	ErrToken = errors.New("auth: malformed job token")
	// ErrWeakToken is returned by CheckToken and ParseToken for a token
	// that is too short or plainly not random.
	ErrWeakToken = errors.New("auth: weak job token")
)

var magic = [8]byte{'G', 'A', 'S', 'P', 'I', 'G', 'O', '1'}

const helloSize = 8 + 8 + 4 + 32

// NewToken returns a fresh random job token.
func NewToken() []byte {
	t := make([]byte, TokenSize)
	if _, err := rand.Read(t); err != nil {
		panic("auth: no randomness: " + err.Error())
	}
	return t
}

// FormatToken encodes a token for an environment variable.
func FormatToken(t []byte) string { return hex.EncodeToString(t) }

// ParseToken decodes a token made by FormatToken and checks it
// (CheckToken): ErrToken when it is not hex of at least MinTokenSize
// bytes, ErrWeakToken when it is plainly not random.
func ParseToken(s string) ([]byte, error) {
	t, err := hex.DecodeString(s)
	if err != nil || len(t) < MinTokenSize {
		return nil, fmt.Errorf("%w: want at least %d hex digits, got %d characters", ErrToken, 2*MinTokenSize, len(s))
	}
	if err := CheckToken(t); err != nil {
		return nil, err
	}
	return t, nil
}

// CheckToken refuses (ErrWeakToken) a token that TokenWeakness finds
// weak. The message says why without showing the token, and how to make
// a good one.
func CheckToken(t []byte) error {
	if why := TokenWeakness(t); why != "" {
		return fmt.Errorf("%w: %s; %s", ErrWeakToken, why, TokenAdvice)
	}
	return nil
}

// TokenAdvice says how to make a good token.
const TokenAdvice = "use a random token of 32 bytes: gaspirun --new-token (or openssl rand -hex 32) prints one"

// TokenWeakness says why t is not a usable job token, or "" when it is:
// shorter than MinTokenSize, or plainly not random (every byte the same,
// fewer than 8 distinct bytes, a short pattern repeated such as the same
// 16 bytes twice, or bytes counting up or down in equal steps). A token
// of NewToken passes: the chance that random bytes fail is below 2^-60.
func TokenWeakness(t []byte) string {
	n := len(t)
	if n < MinTokenSize {
		return fmt.Sprintf("%d bytes, want at least %d", n, MinTokenSize)
	}
	var seen [256]bool
	distinct := 0
	for _, b := range t {
		if !seen[b] {
			seen[b] = true
			distinct++
		}
	}
	switch {
	case distinct == 1:
		return fmt.Sprintf("all %d bytes are %#02x", n, t[0])
	case distinct < 8:
		return fmt.Sprintf("only %d distinct byte values in %d bytes", distinct, n)
	}
	for p := 1; p <= n/2; p++ {
		if bytes.Equal(t[p:], t[:n-p]) {
			return fmt.Sprintf("a pattern of %d bytes repeated", p)
		}
	}
	step := t[1] - t[0]
	for i := 2; i < n && t[i]-t[i-1] == step; i++ {
		if i == n-1 {
			return "the bytes count in equal steps"
		}
	}
	return ""
}

// Purpose separates the uses of one token (data connections, rendezvous,
// membership), so a connection of one kind cannot be passed off as another.
type Purpose [8]byte

// Purposes in use.
var (
	PurposeData       = Purpose{'d', 'a', 't', 'a'}
	PurposeRendezvous = Purpose{'r', 'e', 'n', 'd', 'e', 'z'}
	PurposeControl    = Purpose{'c', 't', 'r', 'l'}
	PurposeShm        = Purpose{'s', 'h', 'm'}
	PurposeTable      = Purpose{'t', 'a', 'b', 'l', 'e'} // the member table's relays at start-up
)

// Handshake runs the protocol on rw (set a deadline on the connection first)
// and returns the peer's ID. dialer says which end this is; the two ends must
// disagree. The accepting end is Accept with no admit function.
func Handshake(rw io.ReadWriter, token []byte, p Purpose, self uint32, dialer bool) (peer uint32, err error) {
	return handshake(rw, token, p, self, dialer, AcceptHooks{}, false)
}

// AcceptHooks let a listener follow the accepting end of a handshake.
type AcceptHooks struct {
	// Hello, when set, is called once the dialer's hello has arrived with
	// the right magic and purpose (the dialer speaks the protocol; it has
	// proved nothing yet).
	Hello func()
	// Admit, when set, is called once the dialer has proved the token and
	// before the acceptor's proof is sent; an error from it ends the
	// handshake with that error and no proof sent.
	Admit func() error
}

// Accept runs the accepting end of the protocol. The acceptor proves that
// it knows the token only after the dialer has proved it, so the dialer's
// Handshake cannot return before the acceptor's h.Admit has run: a
// listener settles there, atomically with respect to the dialer, whether
// it keeps the connection (an admission gate may have shed it meanwhile).
// A dialer whose token is wrong therefore sees the connection closed while
// reading the proof (ErrAuth), never a proof to check.
func Accept(rw io.ReadWriter, token []byte, p Purpose, self uint32, h AcceptHooks) (peer uint32, err error) {
	return handshake(rw, token, p, self, false, h, false)
}

// handshake runs either end; secure marks this end's hello "TLS follows"
// (Dial, Serve), and the two ends must agree.
func handshake(rw io.ReadWriter, token []byte, p Purpose, self uint32, dialer bool, h AcceptHooks, secure bool) (peer uint32, err error) {
	var mine [helloSize]byte
	copy(mine[0:], magic[:])
	copy(mine[8:], p[:])
	if secure {
		mine[15] = tlsFlag
	}
	binary.LittleEndian.PutUint32(mine[16:], self)
	if _, err := rand.Read(mine[20:]); err != nil {
		return 0, err
	}
	if _, err := rw.Write(mine[:]); err != nil {
		return 0, fmt.Errorf("auth: send hello: %w", err)
	}
	var theirs [helloSize]byte
	if _, err := io.ReadFull(rw, theirs[:]); err != nil {
		return 0, fmt.Errorf("%w: reading hello: %w", ErrAuth, err)
	}
	if !bytes.Equal(theirs[0:8], magic[:]) {
		return 0, fmt.Errorf("%w: not a gaspigo peer (bad magic %q)", ErrAuth, theirs[0:8])
	}
	if !bytes.Equal(theirs[8:15], p[:7]) {
		return 0, fmt.Errorf("%w: purpose %q, want %q", ErrAuth, bytes.TrimRight(theirs[8:15], "\x00"), bytes.TrimRight(p[:7], "\x00"))
	}
	if theirs[15] != mine[15] {
		switch theirs[15] {
		case 0, tlsFlag:
		default:
			return 0, fmt.Errorf("%w: purpose %q, want %q", ErrAuth, theirs[8:16], bytes.TrimRight(p[:], "\x00"))
		}
		if theirs[15] == tlsFlag {
			return 0, fmt.Errorf("%w: the peer has TLS on and this process has it off: every process of a job must have the same PGAS_TLS (gaspirun --tls sets it for all)", ErrTLS)
		}
		return 0, fmt.Errorf("%w: this process has TLS on and the peer has it off: every process of a job must have the same PGAS_TLS (gaspirun --tls sets it for all)", ErrTLS)
	}
	peer = binary.LittleEndian.Uint32(theirs[16:])
	if h.Hello != nil {
		h.Hello()
	}
	if dialer {
		if _, err := rw.Write(mac(token, mine[:], theirs[:], dialer)); err != nil {
			return 0, fmt.Errorf("auth: send proof: %w", err)
		}
	}
	var proof [sha256.Size]byte
	if _, err := io.ReadFull(rw, proof[:]); err != nil {
		if dialer {
			return 0, fmt.Errorf("%w: reading proof (the acceptor closed the connection without proving the token: a wrong job token, or a listener shedding load): %w", ErrAuth, err)
		}
		return 0, fmt.Errorf("%w: reading proof: %w", ErrAuth, err)
	}
	if !hmac.Equal(proof[:], mac(token, theirs[:], mine[:], !dialer)) {
		return 0, fmt.Errorf("%w: wrong job token from peer %d", ErrAuth, peer)
	}
	if !dialer {
		if h.Admit != nil {
			if err := h.Admit(); err != nil {
				return 0, err
			}
		}
		if _, err := rw.Write(mac(token, mine[:], theirs[:], dialer)); err != nil {
			return 0, fmt.Errorf("auth: send proof: %w", err)
		}
	}
	return peer, nil
}

func mac(token, own, other []byte, dialer bool) []byte {
	m := hmac.New(sha256.New, token)
	if dialer {
		m.Write([]byte{'D'})
	} else {
		m.Write([]byte{'A'})
	}
	m.Write(own)
	m.Write(other)
	return m.Sum(nil)
}

package auth

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"
)

// ErrTLS is returned when the two ends disagree on TLS (one has PGAS_TLS
// on, the other off) or the TLS layer over an authenticated connection
// fails: the peer's key is not the one derived from this job's token, or
// the TLS handshake itself broke. It wraps ErrAuth: the peer is refused.
var ErrTLS = fmt.Errorf("%w: TLS", ErrAuth)

// tlsKeyLabel is the HKDF info that derives a job's TLS key from its token.
// Changing it changes every job's key.
const tlsKeyLabel = "gaspigo job TLS key (Ed25519) v1"

// tlsFlag marks a hello's purpose as "TLS follows" (its last byte; no
// purpose uses it). The MAC covers both hellos, so a relay cannot strip the
// mark from one side without failing the handshake.
const tlsFlag = 'T'

// Conn is a job connection under TLS, returned by Dial and Serve when TLS is
// on. Close closes the socket under it at once, without TLS's close_notify
// alert (a write that could block on a peer that does not read); frames
// are self-delimiting, so an end of stream is never mistaken for data.
type Conn struct{ *tls.Conn }

// Close closes the underlying connection.
func (c Conn) Close() error { return c.NetConn().Close() }

// Dial runs the dialing end of the token handshake on c (set a deadline on
// c first: it bounds the TLS handshake too) and, when secure, then mutual
// TLS 1.3 over it (see the package doc). It returns the connection to use:
// c itself, or a Conn over c.
func Dial(c net.Conn, token []byte, p Purpose, self uint32, secure bool) (net.Conn, uint32, error) {
	peer, err := handshake(c, token, p, self, true, AcceptHooks{}, secure)
	return upgrade(c, token, peer, err, secure, false)
}

// Serve is Dial's accepting end: Accept (with the hooks h), then TLS when
// secure. A dialer whose TLS setting differs is refused during the token
// handshake with an error saying so.
func Serve(c net.Conn, token []byte, p Purpose, self uint32, h AcceptHooks, secure bool) (net.Conn, uint32, error) {
	peer, err := handshake(c, token, p, self, false, h, secure)
	return upgrade(c, token, peer, err, secure, true)
}

// upgrade runs TLS over c after a successful handshake, when secure.
func upgrade(c net.Conn, token []byte, peer uint32, err error, secure, server bool) (net.Conn, uint32, error) {
	if err != nil || !secure {
		return c, peer, err
	}
	sc, err := wrapTLS(c, token, server)
	if err != nil {
		return c, peer, err
	}
	return sc, peer, nil
}

// Unwrap returns the connection under a Conn, or c itself.
func Unwrap(c net.Conn) net.Conn {
	if s, ok := c.(Conn); ok {
		return s.NetConn()
	}
	return c
}

func wrapTLS(c net.Conn, token []byte, server bool) (net.Conn, error) {
	cfg, err := TLSConfig(token, server)
	if err != nil {
		return nil, err
	}
	var tc *tls.Conn
	if server {
		tc = tls.Server(c, cfg)
	} else {
		tc = tls.Client(c, cfg)
	}
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("%w: handshake: %w", ErrTLS, err)
	}
	return Conn{tc}, nil
}

// jobKey is a job's TLS identity, derived from its token.
type jobKey struct {
	cert tls.Certificate
	pub  ed25519.PublicKey
}

var (
	keysMu sync.Mutex
	keys   = map[[sha256.Size]byte]*jobKey{} // by SHA-256 of the token; a process has one or two tokens
)

// keyFor derives (once per token) the job's Ed25519 key pair with
// HKDF-SHA256 from the token and makes a self-signed certificate for it.
// Every process of the job derives the same pair.
func keyFor(token []byte) (*jobKey, error) {
	if why := TokenWeakness(token); why != "" {
		return nil, fmt.Errorf("%w: %s", ErrWeakToken, why)
	}
	id := sha256.Sum256(token)
	keysMu.Lock()
	defer keysMu.Unlock()
	if k := keys[id]; k != nil {
		return k, nil
	}
	seed, err := hkdf.Key(sha256.New, token, nil, tlsKeyLabel, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("%w: deriving the key: %w", ErrTLS, err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "gaspigo job"},
		NotBefore:    time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("%w: making the certificate: %w", ErrTLS, err)
	}
	k := &jobKey{cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, pub: pub}
	keys[id] = k
	return k, nil
}

// TLSConfig returns the TLS configuration of a job connection's end: TLS
// 1.3 only, the token-derived certificate presented on both ends, and the
// peer's certificate accepted only when its public key is the
// token-derived one (pinned: no host names, no certificate authorities,
// no dates).
func TLSConfig(token []byte, server bool) (*tls.Config, error) {
	k, err := keyFor(token)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		MaxVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{k.cert},
		SessionTicketsDisabled: true,
		// The chain is not verified against roots or names; the pin below
		// is the whole check, and VerifyConnection runs on both ends.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) != 1 {
				return fmt.Errorf("%w: the peer presented %d certificates, want its job certificate only", ErrTLS, len(cs.PeerCertificates))
			}
			pub, ok := cs.PeerCertificates[0].PublicKey.(ed25519.PublicKey)
			if !ok || !pub.Equal(k.pub) {
				return fmt.Errorf("%w: the peer's key is not this job's (it was not derived from this job's token)", ErrTLS)
			}
			return nil
		},
	}
	if server {
		cfg.ClientAuth = tls.RequireAnyClientCert
	}
	return cfg, nil
}

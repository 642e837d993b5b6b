package tcp

import (
	"errors"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
)

// A peer whose TLS setting differs is refused at the handshake, on both
// ends, with an error naming PGAS_TLS; the listener goes on serving peers
// that agree, and no PeerDown follows.
func TestTLSMismatchRefused(t *testing.T) {
	for _, listenerTLS := range []bool{true, false} {
		token := auth.NewToken()
		ev := newEvents()
		tr := newOne(t, 1, token, func(c *Config) { c.TLS = listenerTLS }, ev.hooks())
		h := newHandler(nil)
		if err := tr.Start(h); err != nil {
			t.Fatal(err)
		}
		_, err := rawDialTLS(t, tr.Addr(), token, 0, !listenerTLS)
		if !errors.Is(err, auth.ErrTLS) || !strings.Contains(err.Error(), "PGAS_TLS") {
			t.Fatalf("listener TLS %v: dialer got %v, want ErrTLS naming PGAS_TLS", listenerTLS, err)
		}
		if rerr := ev.waitRefused(t); !errors.Is(rerr, transport.ErrAuth) || !strings.Contains(rerr.Error(), "PGAS_TLS") {
			t.Fatalf("listener TLS %v: refusal %v, want ErrAuth naming PGAS_TLS", listenerTLS, rerr)
		}
		if _, err := rawDialTLS(t, tr.Addr(), token, 0, listenerTLS); err != nil {
			t.Fatalf("listener TLS %v: a peer that agrees: %v", listenerTLS, err)
		}
		waitUp(t, tr, 0)
		noDowns(t, h)
	}
}

package auth

import (
	"errors"
	"net"
	"testing"
)

func pair(t *testing.T, tokA, tokB []byte, pA, pB Purpose) (errA, errB error, peerA, peerB uint32) {
	t.Helper()
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	done := make(chan struct{})
	go func() {
		peerB, errB = Handshake(b, tokB, pB, 7, false)
		if errB != nil {
			b.Close()
		}
		close(done)
	}()
	peerA, errA = Handshake(a, tokA, pA, 3, true)
	if errA != nil {
		a.Close()
	}
	<-done
	return
}

func TestHandshakeAccepts(t *testing.T) {
	tok := NewToken()
	errA, errB, pa, pb := pair(t, tok, tok, PurposeData, PurposeData)
	if errA != nil || errB != nil {
		t.Fatalf("handshake failed: %v / %v", errA, errB)
	}
	if pa != 7 || pb != 3 {
		t.Fatalf("peer ids = %d, %d; want 7, 3", pa, pb)
	}
}

func TestHandshakeRejectsWrongToken(t *testing.T) {
	errA, errB, _, _ := pair(t, NewToken(), NewToken(), PurposeData, PurposeData)
	if !errors.Is(errA, ErrAuth) || !errors.Is(errB, ErrAuth) {
		t.Fatalf("want ErrAuth on both ends, got %v / %v", errA, errB)
	}
}

func TestHandshakeRejectsWrongPurpose(t *testing.T) {
	tok := NewToken()
	errA, errB, _, _ := pair(t, tok, tok, PurposeData, PurposeRendezvous)
	if !errors.Is(errA, ErrAuth) || !errors.Is(errB, ErrAuth) {
		t.Fatalf("want ErrAuth on both ends, got %v / %v", errA, errB)
	}
}

func TestHandshakeRejectsGarbage(t *testing.T) {
	a, b := tcpPair(t)
	defer a.Close()
	go func() {
		b.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n........................"))
		buf := make([]byte, 128)
		b.Read(buf)
		b.Close()
	}()
	if _, err := Handshake(a, NewToken(), PurposeData, 1, false); !errors.Is(err, ErrAuth) {
		t.Fatalf("want ErrAuth for garbage, got %v", err)
	}
}

func TestParseToken(t *testing.T) {
	tok := NewToken()
	got, err := ParseToken(FormatToken(tok))
	if err != nil || string(got) != string(tok) {
		t.Fatalf("round trip failed: %v", err)
	}
	for _, bad := range []string{"", "zz", "abcd"} {
		if _, err := ParseToken(bad); !errors.Is(err, ErrToken) {
			t.Errorf("ParseToken(%q) = %v, want ErrToken", bad, err)
		}
	}
}

func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		ch <- c
	}()
	a, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return a, <-ch
}

// Rule: the acceptor's admit runs after the dialer proved the token and
// before the acceptor proves it, so a dialer never completes a handshake
// that the acceptor then drops; an admit error reaches the dialer as
// ErrAuth.
func TestAcceptAdmitsBeforeProving(t *testing.T) {
	tok := NewToken()
	for _, refuse := range []bool{false, true} {
		a, b := tcpPair(t)
		admitted := make(chan struct{})
		errShed := errors.New("shed")
		done := make(chan error, 1)
		go func() {
			greeted := false
			_, err := Accept(b, tok, PurposeControl, 7, AcceptHooks{
				Hello: func() { greeted = true },
				Admit: func() error {
					if !greeted {
						t.Error("Admit before Hello")
					}
					close(admitted)
					if refuse {
						return errShed
					}
					return nil
				},
			})
			if err != nil {
				b.Close()
			}
			done <- err
		}()
		_, errA := Handshake(a, tok, PurposeControl, 3, true)
		select {
		case <-admitted:
		default:
			t.Fatalf("refuse=%v: the dialer's handshake returned (%v) before the acceptor's admit ran", refuse, errA)
		}
		errB := <-done
		if refuse && (!errors.Is(errB, errShed) || !errors.Is(errA, ErrAuth)) {
			t.Errorf("admit refused: acceptor %v (want the admit error), dialer %v (want ErrAuth)", errB, errA)
		}
		if !refuse && (errA != nil || errB != nil) {
			t.Errorf("admitted: %v / %v", errA, errB)
		}
		a.Close()
		b.Close()
	}
}

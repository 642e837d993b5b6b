package auth

import (
	"bytes"
	"errors"
	"net"
	"strings"
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

// Weak tokens are refused wherever a token is parsed or checked, with a
// reason and the way to make a good one; random tokens pass.
func TestCheckToken(t *testing.T) {
	count := make([]byte, 32)
	for i := range count {
		count[i] = byte(200 - 3*i)
	}
	for _, c := range []struct {
		name string
		tok  []byte
		why  string
	}{
		{"short", NewToken()[:15], "15 bytes, want at least 16"},
		{"zeros", make([]byte, 32), "all 32 bytes are 0x00"},
		{"ones", bytes.Repeat([]byte{0xff}, 16), "all 16 bytes are 0xff"},
		{"few values", []byte("abababababcabcabcdddeeefffabcdef"), "only 6 distinct byte values in 32 bytes"},
		{"hex text twice", []byte("0123456789abcdef0123456789abcdef"), "a pattern of 16 bytes repeated"},
		{"a word repeated", []byte("password1password1password1"), "a pattern of 9 bytes repeated"},
		{"counting", count, "the bytes count in equal steps"},
	} {
		err := CheckToken(c.tok)
		if !errors.Is(err, ErrWeakToken) || !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "gaspirun --new-token") {
			t.Errorf("%s: CheckToken = %v, want ErrWeakToken saying %q and how to make a good one", c.name, err, c.why)
		}
		if len(c.tok) >= MinTokenSize {
			if _, err := ParseToken(FormatToken(c.tok)); !errors.Is(err, ErrWeakToken) {
				t.Errorf("%s: ParseToken = %v, want ErrWeakToken", c.name, err)
			}
		}
	}
	for range 10000 {
		if tok := NewToken(); CheckToken(tok) != nil || CheckToken(tok[:MinTokenSize]) != nil {
			t.Fatalf("a random token refused: %v", CheckToken(tok))
		}
	}
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

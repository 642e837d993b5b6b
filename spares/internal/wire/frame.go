package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrProtocol: a control-RPC peer sent a frame that is too large or cannot
// be decoded.
var ErrProtocol = errors.New("spares: control protocol error")

// CodeOK is the code of a control answer that succeeded.
const CodeOK = "ok"

// Frames are a 4-byte big-endian length and a body.

// WriteFrame writes body, of at most max bytes, as one frame.
func WriteFrame(w io.Writer, body []byte, max int) error {
	if len(body) > max {
		return fmt.Errorf("%w: frame of %d bytes, max %d", ErrProtocol, len(body), max)
	}
	b := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(b, uint32(len(body)))
	copy(b[4:], body)
	_, err := w.Write(b)
	return err
}

// ReadFrame reads a frame of at most max bytes.
func ReadFrame(r io.Reader, max uint32) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > max {
		return nil, fmt.Errorf("%w: frame of %d bytes announced, max %d", ErrProtocol, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

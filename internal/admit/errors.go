package admit

import "errors"

// ErrShed is the cause recorded for a pending connection that the gate
// closed to make room for a newer one.
var ErrShed = errors.New("admit: pending connection shed to make room for a newer one")

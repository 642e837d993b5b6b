package pgas

import (
	"context"
	"fmt"
	"unsafe"
)

// Op is a built-in reduction.
type Op uint8

// Reductions for Allreduce.
const (
	OpSum Op = iota
	OpMin
	OpMax
)

// Number is an element type Allreduce reduces with a built-in Op.
type Number interface {
	~float64 | ~int64 | ~uint64
}

// Allreduce reduces data element-wise across g in place with op. The result
// is bit-identical on every member and across runs with the same inputs.
// For Min and Max a NaN in the lower group position wins.
func Allreduce[T Number](ctx context.Context, rt *Runtime, g *Group, data []T, op Op) error {
	var f func(dst, src []T)
	switch op {
	case OpSum:
		f = func(dst, src []T) {
			for i := range dst {
				dst[i] += src[i]
			}
		}
	case OpMin:
		f = func(dst, src []T) {
			for i := range dst {
				if src[i] < dst[i] {
					dst[i] = src[i]
				}
			}
		}
	case OpMax:
		f = func(dst, src []T) {
			for i := range dst {
				if src[i] > dst[i] {
					dst[i] = src[i]
				}
			}
		}
	default:
		return fmt.Errorf("pgas: allreduce: unknown op %d: %w", op, ErrInvalid)
	}
	return AllreduceFunc(ctx, rt, g, data, f)
}

// AllreduceFunc reduces data across g in place with a user reduction:
// f(dst, src) sets dst to dst op src, dst being the lower group position's
// operand (so f need not be commutative, only associative). T must be plain
// data with no pointers.
func AllreduceFunc[T any](ctx context.Context, rt *Runtime, g *Group, data []T, f func(dst, src []T)) error {
	return rt.AllreduceBytes(ctx, g, asBytes(data), func(dst, src []byte) {
		f(fromBytes[T](dst), fromBytes[T](src))
	})
}

// Allgather returns every member's data, concatenated in group order.
// Every member passes the same number of elements.
func Allgather[T any](ctx context.Context, rt *Runtime, g *Group, data []T) ([]T, error) {
	out, _, err := allgatherRanks(ctx, rt, g, data)
	return out, err
}

// allgatherRanks is Allgather that also returns the members, in the
// order of their data.
func allgatherRanks[T any](ctx context.Context, rt *Runtime, g *Group, data []T) ([]T, []int, error) {
	var out []T
	_, ranks, err := rt.allgather(ctx, g, asBytes(data), func(n int) []byte {
		out = make([]T, len(data)*n)
		return asBytes(out)
	})
	if err != nil {
		return nil, nil, err
	}
	return out, ranks, nil
}

func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(zero)))
}

// fromBytes views b as []T. b comes from asBytes or from a mailbox buffer,
// which is allocated 8-byte aligned.
func fromBytes[T any](b []byte) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(b) == 0 {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/size)
}

//go:build amd64 && !purego

#include "textflag.h"

// ownValuesFMA is ownValuesGo with the fused multiply-add instruction: for
// each of the n points listed at idx, acc = cnorm[a] for its centroid
// a = pa[i], then acc = x[t]·cpack(a, t) + acc in dimension order, one
// rounding each (math.FMA's bits), stored at out. The loop over points
// carries nothing from one to the next, so the processor runs several
// points' chains side by side.
//
// Register use: SI points, BX d, R8 cpack, R9 cnorm, R10 idx, R11 pa,
// CX points left, DI out, R12 the bytes of one block of centroids
// (d·lanes·8), R13 the point's row, AX its centroid's first entry in
// cpack, DX dimensions left; X0 the value, X1 a coordinate.
//
// func ownValuesFMA(points *float64, d int, cpack *float64, cnorm *float64, idx *int32, pa *int32, n int, out *float64)
TEXT ·ownValuesFMA(SB), NOSPLIT, $0-64
	MOVQ  points+0(FP), SI
	MOVQ  d+8(FP), BX
	MOVQ  cpack+16(FP), R8
	MOVQ  cnorm+24(FP), R9
	MOVQ  idx+32(FP), R10
	MOVQ  pa+40(FP), R11
	MOVQ  n+48(FP), CX
	MOVQ  out+56(FP), DI
	TESTQ CX, CX
	JLE   ovDone
	TESTQ BX, BX
	JLE   ovDone
	MOVQ  BX, R12
	SHLQ  $6, R12

ovPoint:
	// Fetch the row of the point 32 ahead (its first two cache
	// lines): the listed points are in order but with gaps, which the
	// hardware's own prefetch follows poorly.
	CMPQ       CX, $32
	JLE        ovNow
	MOVLQSX    128(R10), AX
	IMULQ      BX, AX
	PREFETCHT0 (SI)(AX*8)
	PREFETCHT0 64(SI)(AX*8)

ovNow:
	MOVLQSX (R10), AX
	MOVLQSX (R11)(AX*4), DX
	IMULQ   BX, AX
	LEAQ    (SI)(AX*8), R13
	VMOVSD  (R9)(DX*8), X0
	MOVQ    DX, AX
	SHRQ    $3, AX
	IMULQ   R12, AX
	ANDQ    $7, DX
	LEAQ    (AX)(DX*8), AX
	ADDQ    R8, AX
	MOVQ    BX, DX

ovDim:
	VMOVSD      (R13), X1
	VFMADD231SD (AX), X1, X0
	ADDQ        $8, R13
	ADDQ        $64, AX
	DECQ        DX
	JNZ         ovDim

	VMOVSD X0, (DI)
	ADDQ   $4, R10
	ADDQ   $8, DI
	DECQ   CX
	JNZ    ovPoint

ovDone:
	RET

//go:build amd64 && !purego

#include "textflag.h"

// Constants: lane numbers 0..7, index strides and +Inf.
DATA kmIota<>+0(SB)/8, $0.0
DATA kmIota<>+8(SB)/8, $1.0
DATA kmIota<>+16(SB)/8, $2.0
DATA kmIota<>+24(SB)/8, $3.0
DATA kmIota<>+32(SB)/8, $4.0
DATA kmIota<>+40(SB)/8, $5.0
DATA kmIota<>+48(SB)/8, $6.0
DATA kmIota<>+56(SB)/8, $7.0
GLOBL kmIota<>(SB), RODATA|NOPTR, $64

DATA kmFour<>+0(SB)/8, $4.0
DATA kmFour<>+8(SB)/8, $4.0
DATA kmFour<>+16(SB)/8, $4.0
DATA kmFour<>+24(SB)/8, $4.0
GLOBL kmFour<>(SB), RODATA|NOPTR, $32

DATA kmEight<>+0(SB)/8, $8.0
GLOBL kmEight<>(SB), RODATA|NOPTR, $8

DATA kmSixteen<>+0(SB)/8, $16.0
GLOBL kmSixteen<>(SB), RODATA|NOPTR, $8

DATA kmInf<>+0(SB)/8, $0x7ff0000000000000
GLOBL kmInf<>(SB), RODATA|NOPTR, $8

// Packed centroids: block b (8 centroids), dimension t, lane l at
// ((b*d)+t)*8+l, holding -2*c. The value of centroid j for point x is
//   acc = ||c_j||²; for t in 0..d-1: acc = FMA(x_t, -2*c_jt, acc)
// exactly as argminGo computes it. Each lane keeps a running minimum and
// the index of the centroid that gave it, replaced only on a strict "<", so
// per lane the earliest index wins ties; the final reduction takes the
// smallest value and, among equal values, the smallest index.
//
// flags bit 0: first call for these points (start from +Inf/0 instead of
// loading the state); bit 1: last call (reduce and store the winning index
// in best[i] as int32 instead of storing the state).
//
// Register use (AVX-512):
//   SI  x of the current group of 4 points   DX  d*8 (point stride)
//   R10 3*d*8                                BX  d*64 (block stride)
//   DI  state of the current group           CX  points left
//   AX  centroid block pointer               R12 norm pointer
//   R9  blocks left                          R8  &x[point 0][t]
//   R11 dimensions left                      R13 flags   R14 &best[group]
//   Z0-Z7   accumulators, point p vector v in Z(2p+v)
//   Z8-Z11  running lane minima of points 0-3
//   Z12-Z15 running lane indices of points 0-3
//   Z16,Z17 centroid vectors   Z18-Z21 broadcast coordinates
//   Z22,Z23 indices of the two centroid vectors   Z24 8.0   Z25 16.0
//   Z26 jbase + lane   Z27 +Inf

// func argminAVX512(x *float64, np, d int, cp *float64, nb int, cn *float64, jbase float64, state *float64, best *int32, flags int)
TEXT ·argminAVX512(SB), NOSPLIT, $0-80
	MOVQ x+0(FP), SI
	MOVQ np+8(FP), CX
	MOVQ d+16(FP), DX
	MOVQ state+56(FP), DI
	MOVQ best+64(FP), R14
	MOVQ flags+72(FP), R13
	SHLQ $3, DX
	MOVQ DX, BX
	SHLQ $3, BX
	LEAQ (DX)(DX*2), R10
	VBROADCASTSD jbase+48(FP), Z26
	VADDPD kmIota<>(SB), Z26, Z26
	VBROADCASTSD kmEight<>(SB), Z24
	VBROADCASTSD kmSixteen<>(SB), Z25
	VBROADCASTSD kmInf<>(SB), Z27

avx512group:
	BTQ $0, R13
	JCC avx512load
	VMOVAPD Z27, Z8
	VMOVAPD Z27, Z9
	VMOVAPD Z27, Z10
	VMOVAPD Z27, Z11
	VPXORQ  Z12, Z12, Z12
	VPXORQ  Z13, Z13, Z13
	VPXORQ  Z14, Z14, Z14
	VPXORQ  Z15, Z15, Z15
	JMP avx512ready

avx512load:
	VMOVUPD 0(DI), Z8
	VMOVUPD 64(DI), Z12
	VMOVUPD 128(DI), Z9
	VMOVUPD 192(DI), Z13
	VMOVUPD 256(DI), Z10
	VMOVUPD 320(DI), Z14
	VMOVUPD 384(DI), Z11
	VMOVUPD 448(DI), Z15

avx512ready:
	VMOVAPD Z26, Z22
	VADDPD  Z24, Z26, Z23
	MOVQ cp+24(FP), AX
	MOVQ cn+40(FP), R12
	MOVQ nb+32(FP), R9

avx512pair:
	CMPQ R9, $2
	JLT  avx512single
	VMOVUPD (R12), Z0
	VMOVUPD 64(R12), Z1
	VMOVAPD Z0, Z2
	VMOVAPD Z1, Z3
	VMOVAPD Z0, Z4
	VMOVAPD Z1, Z5
	VMOVAPD Z0, Z6
	VMOVAPD Z1, Z7
	MOVQ SI, R8
	MOVQ d+16(FP), R11

avx512pairdim:
	VMOVUPD (AX), Z16
	VMOVUPD (AX)(BX*1), Z17
	VBROADCASTSD (R8), Z18
	VBROADCASTSD (R8)(DX*1), Z19
	VBROADCASTSD (R8)(DX*2), Z20
	VBROADCASTSD (R8)(R10*1), Z21
	VFMADD231PD Z18, Z16, Z0
	VFMADD231PD Z18, Z17, Z1
	VFMADD231PD Z19, Z16, Z2
	VFMADD231PD Z19, Z17, Z3
	VFMADD231PD Z20, Z16, Z4
	VFMADD231PD Z20, Z17, Z5
	VFMADD231PD Z21, Z16, Z6
	VFMADD231PD Z21, Z17, Z7
	ADDQ $8, R8
	ADDQ $64, AX
	DECQ R11
	JNZ  avx512pairdim

	ADDQ BX, AX
	ADDQ $128, R12
	SUBQ $2, R9
	VCMPPD  $1, Z8, Z0, K1
	VMOVAPD Z0, K1, Z8
	VMOVAPD Z22, K1, Z12
	VCMPPD  $1, Z8, Z1, K1
	VMOVAPD Z1, K1, Z8
	VMOVAPD Z23, K1, Z12
	VCMPPD  $1, Z9, Z2, K1
	VMOVAPD Z2, K1, Z9
	VMOVAPD Z22, K1, Z13
	VCMPPD  $1, Z9, Z3, K1
	VMOVAPD Z3, K1, Z9
	VMOVAPD Z23, K1, Z13
	VCMPPD  $1, Z10, Z4, K1
	VMOVAPD Z4, K1, Z10
	VMOVAPD Z22, K1, Z14
	VCMPPD  $1, Z10, Z5, K1
	VMOVAPD Z5, K1, Z10
	VMOVAPD Z23, K1, Z14
	VCMPPD  $1, Z11, Z6, K1
	VMOVAPD Z6, K1, Z11
	VMOVAPD Z22, K1, Z15
	VCMPPD  $1, Z11, Z7, K1
	VMOVAPD Z7, K1, Z11
	VMOVAPD Z23, K1, Z15
	VADDPD Z25, Z22, Z22
	VADDPD Z25, Z23, Z23
	JMP  avx512pair

avx512single:
	TESTQ R9, R9
	JZ    avx512end
	VMOVUPD (R12), Z0
	VMOVAPD Z0, Z2
	VMOVAPD Z0, Z4
	VMOVAPD Z0, Z6
	MOVQ SI, R8
	MOVQ d+16(FP), R11

avx512singledim:
	VMOVUPD (AX), Z16
	VBROADCASTSD (R8), Z18
	VBROADCASTSD (R8)(DX*1), Z19
	VBROADCASTSD (R8)(DX*2), Z20
	VBROADCASTSD (R8)(R10*1), Z21
	VFMADD231PD Z18, Z16, Z0
	VFMADD231PD Z19, Z16, Z2
	VFMADD231PD Z20, Z16, Z4
	VFMADD231PD Z21, Z16, Z6
	ADDQ $8, R8
	ADDQ $64, AX
	DECQ R11
	JNZ  avx512singledim
	VCMPPD  $1, Z8, Z0, K1
	VMOVAPD Z0, K1, Z8
	VMOVAPD Z22, K1, Z12
	VCMPPD  $1, Z9, Z2, K1
	VMOVAPD Z2, K1, Z9
	VMOVAPD Z22, K1, Z13
	VCMPPD  $1, Z10, Z4, K1
	VMOVAPD Z4, K1, Z10
	VMOVAPD Z22, K1, Z14
	VCMPPD  $1, Z11, Z6, K1
	VMOVAPD Z6, K1, Z11
	VMOVAPD Z22, K1, Z15

avx512end:
	BTQ $1, R13
	JCS avx512reduce
	VMOVUPD Z8, 0(DI)
	VMOVUPD Z12, 64(DI)
	VMOVUPD Z9, 128(DI)
	VMOVUPD Z13, 192(DI)
	VMOVUPD Z10, 256(DI)
	VMOVUPD Z14, 320(DI)
	VMOVUPD Z11, 384(DI)
	VMOVUPD Z15, 448(DI)
	JMP avx512next

avx512reduce:
	VSHUFF64X2 $0x4e, Z8, Z8, Z0
	VMINPD     Z0, Z8, Z0
	VSHUFF64X2 $0xb1, Z0, Z0, Z1
	VMINPD     Z1, Z0, Z0
	VPERMILPD  $0x55, Z0, Z1
	VMINPD     Z1, Z0, Z0
	VCMPPD     $0, Z0, Z8, K1
	VMOVAPD    Z27, Z2
	VMOVAPD    Z12, K1, Z2
	VSHUFF64X2 $0x4e, Z2, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VSHUFF64X2 $0xb1, Z2, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VPERMILPD  $0x55, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VCVTTSD2SI X2, AX
	MOVL       AX, 0(R14)
	VSHUFF64X2 $0x4e, Z9, Z9, Z0
	VMINPD     Z0, Z9, Z0
	VSHUFF64X2 $0xb1, Z0, Z0, Z1
	VMINPD     Z1, Z0, Z0
	VPERMILPD  $0x55, Z0, Z1
	VMINPD     Z1, Z0, Z0
	VCMPPD     $0, Z0, Z9, K1
	VMOVAPD    Z27, Z2
	VMOVAPD    Z13, K1, Z2
	VSHUFF64X2 $0x4e, Z2, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VSHUFF64X2 $0xb1, Z2, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VPERMILPD  $0x55, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VCVTTSD2SI X2, AX
	MOVL       AX, 4(R14)
	VSHUFF64X2 $0x4e, Z10, Z10, Z0
	VMINPD     Z0, Z10, Z0
	VSHUFF64X2 $0xb1, Z0, Z0, Z1
	VMINPD     Z1, Z0, Z0
	VPERMILPD  $0x55, Z0, Z1
	VMINPD     Z1, Z0, Z0
	VCMPPD     $0, Z0, Z10, K1
	VMOVAPD    Z27, Z2
	VMOVAPD    Z14, K1, Z2
	VSHUFF64X2 $0x4e, Z2, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VSHUFF64X2 $0xb1, Z2, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VPERMILPD  $0x55, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VCVTTSD2SI X2, AX
	MOVL       AX, 8(R14)
	VSHUFF64X2 $0x4e, Z11, Z11, Z0
	VMINPD     Z0, Z11, Z0
	VSHUFF64X2 $0xb1, Z0, Z0, Z1
	VMINPD     Z1, Z0, Z0
	VPERMILPD  $0x55, Z0, Z1
	VMINPD     Z1, Z0, Z0
	VCMPPD     $0, Z0, Z11, K1
	VMOVAPD    Z27, Z2
	VMOVAPD    Z15, K1, Z2
	VSHUFF64X2 $0x4e, Z2, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VSHUFF64X2 $0xb1, Z2, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VPERMILPD  $0x55, Z2, Z3
	VMINPD     Z3, Z2, Z2
	VCVTTSD2SI X2, AX
	MOVL       AX, 12(R14)

avx512next:
	LEAQ (SI)(DX*4), SI
	ADDQ $512, DI
	ADDQ $16, R14
	SUBQ $4, CX
	JGT  avx512group
	VZEROUPPER
	RET

// Register use (AVX2): as above, but 2 points per group and 4 lanes:
//   Y0-Y3   point 0 accumulators: block 0 lanes 0-3, 4-7, block 1 lanes 0-3, 4-7
//   Y4-Y7   point 1 accumulators, same order
//   Y8,Y9   running lane minima of points 0,1
//   Y10,Y11 running lane indices of points 0,1
//   Y12,Y13 broadcast coordinates   Y14 index of the vector being merged
//   Y15 comparison mask

// func argminAVX2(x *float64, np, d int, cp *float64, nb int, cn *float64, jbase float64, state *float64, best *int32, flags int)
TEXT ·argminAVX2(SB), NOSPLIT, $0-80
	MOVQ x+0(FP), SI
	MOVQ np+8(FP), CX
	MOVQ d+16(FP), DX
	MOVQ state+56(FP), DI
	MOVQ best+64(FP), R14
	MOVQ flags+72(FP), R13
	SHLQ $3, DX
	MOVQ DX, BX
	SHLQ $3, BX

avx2group:
	BTQ $0, R13
	JCC avx2load
	VBROADCASTSD kmInf<>(SB), Y8
	VMOVAPD Y8, Y9
	VXORPD  Y10, Y10, Y10
	VXORPD  Y11, Y11, Y11
	JMP avx2ready

avx2load:
	VMOVUPD 0(DI), Y8
	VMOVUPD 32(DI), Y10
	VMOVUPD 64(DI), Y9
	VMOVUPD 96(DI), Y11

avx2ready:
	VBROADCASTSD jbase+48(FP), Y14
	VADDPD kmIota<>(SB), Y14, Y14
	MOVQ cp+24(FP), AX
	MOVQ cn+40(FP), R12
	MOVQ nb+32(FP), R9

avx2pair:
	CMPQ R9, $2
	JLT  avx2single
	VMOVUPD (R12), Y0
	VMOVUPD 32(R12), Y1
	VMOVUPD 64(R12), Y2
	VMOVUPD 96(R12), Y3
	VMOVAPD Y0, Y4
	VMOVAPD Y1, Y5
	VMOVAPD Y2, Y6
	VMOVAPD Y3, Y7
	MOVQ SI, R8
	MOVQ d+16(FP), R11

avx2pairdim:
	VBROADCASTSD (R8), Y12
	VBROADCASTSD (R8)(DX*1), Y13
	VFMADD231PD (AX), Y12, Y0
	VFMADD231PD 32(AX), Y12, Y1
	VFMADD231PD (AX)(BX*1), Y12, Y2
	VFMADD231PD 32(AX)(BX*1), Y12, Y3
	VFMADD231PD (AX), Y13, Y4
	VFMADD231PD 32(AX), Y13, Y5
	VFMADD231PD (AX)(BX*1), Y13, Y6
	VFMADD231PD 32(AX)(BX*1), Y13, Y7
	ADDQ $8, R8
	ADDQ $64, AX
	DECQ R11
	JNZ  avx2pairdim

	ADDQ BX, AX
	ADDQ $128, R12
	SUBQ $2, R9
	VCMPPD    $1, Y8, Y0, Y15
	VBLENDVPD Y15, Y0, Y8, Y8
	VBLENDVPD Y15, Y14, Y10, Y10
	VCMPPD    $1, Y9, Y4, Y15
	VBLENDVPD Y15, Y4, Y9, Y9
	VBLENDVPD Y15, Y14, Y11, Y11
	VADDPD    kmFour<>(SB), Y14, Y14
	VCMPPD    $1, Y8, Y1, Y15
	VBLENDVPD Y15, Y1, Y8, Y8
	VBLENDVPD Y15, Y14, Y10, Y10
	VCMPPD    $1, Y9, Y5, Y15
	VBLENDVPD Y15, Y5, Y9, Y9
	VBLENDVPD Y15, Y14, Y11, Y11
	VADDPD    kmFour<>(SB), Y14, Y14
	VCMPPD    $1, Y8, Y2, Y15
	VBLENDVPD Y15, Y2, Y8, Y8
	VBLENDVPD Y15, Y14, Y10, Y10
	VCMPPD    $1, Y9, Y6, Y15
	VBLENDVPD Y15, Y6, Y9, Y9
	VBLENDVPD Y15, Y14, Y11, Y11
	VADDPD    kmFour<>(SB), Y14, Y14
	VCMPPD    $1, Y8, Y3, Y15
	VBLENDVPD Y15, Y3, Y8, Y8
	VBLENDVPD Y15, Y14, Y10, Y10
	VCMPPD    $1, Y9, Y7, Y15
	VBLENDVPD Y15, Y7, Y9, Y9
	VBLENDVPD Y15, Y14, Y11, Y11
	VADDPD    kmFour<>(SB), Y14, Y14
	JMP  avx2pair

avx2single:
	TESTQ R9, R9
	JZ    avx2end
	VMOVUPD (R12), Y0
	VMOVUPD 32(R12), Y1
	VMOVAPD Y0, Y4
	VMOVAPD Y1, Y5
	MOVQ SI, R8
	MOVQ d+16(FP), R11

avx2singledim:
	VBROADCASTSD (R8), Y12
	VBROADCASTSD (R8)(DX*1), Y13
	VFMADD231PD (AX), Y12, Y0
	VFMADD231PD 32(AX), Y12, Y1
	VFMADD231PD (AX), Y13, Y4
	VFMADD231PD 32(AX), Y13, Y5
	ADDQ $8, R8
	ADDQ $64, AX
	DECQ R11
	JNZ  avx2singledim
	VCMPPD    $1, Y8, Y0, Y15
	VBLENDVPD Y15, Y0, Y8, Y8
	VBLENDVPD Y15, Y14, Y10, Y10
	VCMPPD    $1, Y9, Y4, Y15
	VBLENDVPD Y15, Y4, Y9, Y9
	VBLENDVPD Y15, Y14, Y11, Y11
	VADDPD    kmFour<>(SB), Y14, Y14
	VCMPPD    $1, Y8, Y1, Y15
	VBLENDVPD Y15, Y1, Y8, Y8
	VBLENDVPD Y15, Y14, Y10, Y10
	VCMPPD    $1, Y9, Y5, Y15
	VBLENDVPD Y15, Y5, Y9, Y9
	VBLENDVPD Y15, Y14, Y11, Y11
	VADDPD    kmFour<>(SB), Y14, Y14

avx2end:
	BTQ $1, R13
	JCS avx2reduce
	VMOVUPD Y8, 0(DI)
	VMOVUPD Y10, 32(DI)
	VMOVUPD Y9, 64(DI)
	VMOVUPD Y11, 96(DI)
	JMP avx2next

avx2reduce:
	VPERM2F128   $0x01, Y8, Y8, Y0
	VMINPD       Y0, Y8, Y0
	VPERMILPD    $0x5, Y0, Y1
	VMINPD       Y1, Y0, Y0
	VCMPPD       $0, Y0, Y8, Y1
	VBROADCASTSD kmInf<>(SB), Y2
	VBLENDVPD    Y1, Y10, Y2, Y2
	VPERM2F128   $0x01, Y2, Y2, Y3
	VMINPD       Y3, Y2, Y2
	VPERMILPD    $0x5, Y2, Y3
	VMINPD       Y3, Y2, Y2
	VCVTTSD2SI   X2, AX
	MOVL         AX, 0(R14)
	VPERM2F128   $0x01, Y9, Y9, Y0
	VMINPD       Y0, Y9, Y0
	VPERMILPD    $0x5, Y0, Y1
	VMINPD       Y1, Y0, Y0
	VCMPPD       $0, Y0, Y9, Y1
	VBROADCASTSD kmInf<>(SB), Y2
	VBLENDVPD    Y1, Y11, Y2, Y2
	VPERM2F128   $0x01, Y2, Y2, Y3
	VMINPD       Y3, Y2, Y2
	VPERMILPD    $0x5, Y2, Y3
	VMINPD       Y3, Y2, Y2
	VCVTTSD2SI   X2, AX
	MOVL         AX, 4(R14)

avx2next:
	LEAQ (SI)(DX*2), SI
	ADDQ $128, DI
	ADDQ $8, R14
	SUBQ $2, CX
	JGT  avx2group
	VZEROUPPER
	RET

// Accumulation (used by both assembly kernels; needs AVX2 only). For each
// point i in order, with a = best[i]:
//   if assign[i] != a { assign[i] = a; changed++ }
//   counts[a]++
//   sums[a][t] += x[t]                       for every t
//   p[l] = Σ (x_t-c_t)·(x_t-c_t)   rounded separately (no FMA), over
//          t < d&^3 with t%4 == l, in increasing t
//   dist = (p0+p2) + (p1+p3), then dist += (x_t-c_t)² for the tail t ≥ d&^3
//   sse += dist
// which is exactly what accumulateGo computes. An index outside [0, k)
// stops the loop and reports changed = -1 (never written out of bounds).

// func accumulateAVX2(x *float64, n, d int, best, assign *int32, cent, sums *float64, counts *int64, k int) (sse float64, changed int64)
TEXT ·accumulateAVX2(SB), NOSPLIT, $0-88
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ d+16(FP), R15
	MOVQ best+24(FP), R8
	MOVQ assign+32(FP), R9
	MOVQ cent+40(FP), R10
	MOVQ sums+48(FP), R11
	MOVQ counts+56(FP), R12
	XORQ R13, R13
	VXORPD X7, X7, X7
	MOVQ R15, R14
	ANDQ $-4, R14
	MOVQ R15, DX
	SHLQ $3, DX
	TESTQ CX, CX
	JZ   accdone

accpoint:
	MOVLQSX (R8), AX
	CMPQ AX, k+64(FP)
	JAE  accbad
	MOVL (R9), BX
	CMPL AX, BX
	JEQ  accsame
	MOVL AX, (R9)
	INCQ R13

accsame:
	INCQ (R12)(AX*8)
	IMULQ DX, AX
	LEAQ (R10)(AX*1), DI
	LEAQ (R11)(AX*1), BX
	VXORPD Y0, Y0, Y0
	XORQ AX, AX

accvec:
	CMPQ AX, R14
	JGE  accred
	VMOVUPD (SI)(AX*8), Y1
	VADDPD  (BX)(AX*8), Y1, Y2
	VMOVUPD Y2, (BX)(AX*8)
	VSUBPD  (DI)(AX*8), Y1, Y1
	VMULPD  Y1, Y1, Y1
	VADDPD  Y1, Y0, Y0
	ADDQ $4, AX
	JMP  accvec

accred:
	VEXTRACTF128 $1, Y0, X1
	VADDPD    X1, X0, X0
	VPERMILPD $1, X0, X1
	VADDSD    X1, X0, X0

acctail:
	CMPQ AX, R15
	JGE  accnext
	VMOVSD (SI)(AX*8), X1
	VADDSD (BX)(AX*8), X1, X2
	VMOVSD X2, (BX)(AX*8)
	VSUBSD (DI)(AX*8), X1, X1
	VMULSD X1, X1, X1
	VADDSD X1, X0, X0
	INCQ AX
	JMP  acctail

accnext:
	VADDSD X0, X7, X7
	ADDQ DX, SI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JNZ  accpoint

accdone:
	VMOVSD X7, sse+72(FP)
	MOVQ R13, changed+80(FP)
	VZEROUPPER
	RET

accbad:
	MOVQ $-1, R13
	JMP  accdone

// argmin2AVX512 is argminAVX512 that also keeps, per lane, the second
// smallest value seen (min2 = min(min2, max(min1, v)) before each merge, in
// Z28-Z31 for points 0-3), and always stores the state: per point 8 lane
// minima, 8 indices, 8 second minima (24 float64). flags bit 0 starts from
// an empty state; otherwise the state is loaded.
// func argmin2AVX512(x *float64, np, d int, cp *float64, nb int, cn *float64, jbase float64, state *float64, flags int)
TEXT ·argmin2AVX512(SB), NOSPLIT, $0-72
	MOVQ x+0(FP), SI
	MOVQ np+8(FP), CX
	MOVQ d+16(FP), DX
	MOVQ state+56(FP), DI
	MOVQ flags+64(FP), R13
	SHLQ $3, DX
	MOVQ DX, BX
	SHLQ $3, BX
	LEAQ (DX)(DX*2), R10
	VBROADCASTSD jbase+48(FP), Z26
	VADDPD kmIota<>(SB), Z26, Z26
	VBROADCASTSD kmEight<>(SB), Z24
	VBROADCASTSD kmSixteen<>(SB), Z25
	VBROADCASTSD kmInf<>(SB), Z27

top2xgroup:
	BTQ $0, R13
	JCC top2xload
	VMOVAPD Z27, Z8
	VMOVAPD Z27, Z9
	VMOVAPD Z27, Z10
	VMOVAPD Z27, Z11
	VPXORQ  Z12, Z12, Z12
	VPXORQ  Z13, Z13, Z13
	VPXORQ  Z14, Z14, Z14
	VPXORQ  Z15, Z15, Z15
	VMOVAPD Z27, Z28
	VMOVAPD Z27, Z29
	VMOVAPD Z27, Z30
	VMOVAPD Z27, Z31
	JMP top2xready

top2xload:
	VMOVUPD 0(DI), Z8
	VMOVUPD 64(DI), Z12
	VMOVUPD 128(DI), Z28
	VMOVUPD 192(DI), Z9
	VMOVUPD 256(DI), Z13
	VMOVUPD 320(DI), Z29
	VMOVUPD 384(DI), Z10
	VMOVUPD 448(DI), Z14
	VMOVUPD 512(DI), Z30
	VMOVUPD 576(DI), Z11
	VMOVUPD 640(DI), Z15
	VMOVUPD 704(DI), Z31

top2xready:
	VMOVAPD Z26, Z22
	VADDPD  Z24, Z26, Z23
	MOVQ cp+24(FP), AX
	MOVQ cn+40(FP), R12
	MOVQ nb+32(FP), R9

top2xpair:
	CMPQ R9, $2
	JLT  top2xsingle
	VMOVUPD (R12), Z0
	VMOVUPD 64(R12), Z1
	VMOVAPD Z0, Z2
	VMOVAPD Z1, Z3
	VMOVAPD Z0, Z4
	VMOVAPD Z1, Z5
	VMOVAPD Z0, Z6
	VMOVAPD Z1, Z7
	MOVQ SI, R8
	MOVQ d+16(FP), R11

top2xpairdim:
	VMOVUPD (AX), Z16
	VMOVUPD (AX)(BX*1), Z17
	VBROADCASTSD (R8), Z18
	VBROADCASTSD (R8)(DX*1), Z19
	VBROADCASTSD (R8)(DX*2), Z20
	VBROADCASTSD (R8)(R10*1), Z21
	VFMADD231PD Z18, Z16, Z0
	VFMADD231PD Z18, Z17, Z1
	VFMADD231PD Z19, Z16, Z2
	VFMADD231PD Z19, Z17, Z3
	VFMADD231PD Z20, Z16, Z4
	VFMADD231PD Z20, Z17, Z5
	VFMADD231PD Z21, Z16, Z6
	VFMADD231PD Z21, Z17, Z7
	ADDQ $8, R8
	ADDQ $64, AX
	DECQ R11
	JNZ  top2xpairdim

	ADDQ BX, AX
	ADDQ $128, R12
	SUBQ $2, R9
	VMAXPD  Z8, Z0, Z16
	VMINPD  Z16, Z28, Z28
	VCMPPD  $1, Z8, Z0, K1
	VMOVAPD Z0, K1, Z8
	VMOVAPD Z22, K1, Z12
	VMAXPD  Z8, Z1, Z16
	VMINPD  Z16, Z28, Z28
	VCMPPD  $1, Z8, Z1, K1
	VMOVAPD Z1, K1, Z8
	VMOVAPD Z23, K1, Z12
	VMAXPD  Z9, Z2, Z16
	VMINPD  Z16, Z29, Z29
	VCMPPD  $1, Z9, Z2, K1
	VMOVAPD Z2, K1, Z9
	VMOVAPD Z22, K1, Z13
	VMAXPD  Z9, Z3, Z16
	VMINPD  Z16, Z29, Z29
	VCMPPD  $1, Z9, Z3, K1
	VMOVAPD Z3, K1, Z9
	VMOVAPD Z23, K1, Z13
	VMAXPD  Z10, Z4, Z16
	VMINPD  Z16, Z30, Z30
	VCMPPD  $1, Z10, Z4, K1
	VMOVAPD Z4, K1, Z10
	VMOVAPD Z22, K1, Z14
	VMAXPD  Z10, Z5, Z16
	VMINPD  Z16, Z30, Z30
	VCMPPD  $1, Z10, Z5, K1
	VMOVAPD Z5, K1, Z10
	VMOVAPD Z23, K1, Z14
	VMAXPD  Z11, Z6, Z16
	VMINPD  Z16, Z31, Z31
	VCMPPD  $1, Z11, Z6, K1
	VMOVAPD Z6, K1, Z11
	VMOVAPD Z22, K1, Z15
	VMAXPD  Z11, Z7, Z16
	VMINPD  Z16, Z31, Z31
	VCMPPD  $1, Z11, Z7, K1
	VMOVAPD Z7, K1, Z11
	VMOVAPD Z23, K1, Z15
	VADDPD Z25, Z22, Z22
	VADDPD Z25, Z23, Z23
	JMP  top2xpair

top2xsingle:
	TESTQ R9, R9
	JZ    top2xend
	VMOVUPD (R12), Z0
	VMOVAPD Z0, Z2
	VMOVAPD Z0, Z4
	VMOVAPD Z0, Z6
	MOVQ SI, R8
	MOVQ d+16(FP), R11

top2xsingledim:
	VMOVUPD (AX), Z16
	VBROADCASTSD (R8), Z18
	VBROADCASTSD (R8)(DX*1), Z19
	VBROADCASTSD (R8)(DX*2), Z20
	VBROADCASTSD (R8)(R10*1), Z21
	VFMADD231PD Z18, Z16, Z0
	VFMADD231PD Z19, Z16, Z2
	VFMADD231PD Z20, Z16, Z4
	VFMADD231PD Z21, Z16, Z6
	ADDQ $8, R8
	ADDQ $64, AX
	DECQ R11
	JNZ  top2xsingledim
	VMAXPD  Z8, Z0, Z16
	VMINPD  Z16, Z28, Z28
	VCMPPD  $1, Z8, Z0, K1
	VMOVAPD Z0, K1, Z8
	VMOVAPD Z22, K1, Z12
	VMAXPD  Z9, Z2, Z16
	VMINPD  Z16, Z29, Z29
	VCMPPD  $1, Z9, Z2, K1
	VMOVAPD Z2, K1, Z9
	VMOVAPD Z22, K1, Z13
	VMAXPD  Z10, Z4, Z16
	VMINPD  Z16, Z30, Z30
	VCMPPD  $1, Z10, Z4, K1
	VMOVAPD Z4, K1, Z10
	VMOVAPD Z22, K1, Z14
	VMAXPD  Z11, Z6, Z16
	VMINPD  Z16, Z31, Z31
	VCMPPD  $1, Z11, Z6, K1
	VMOVAPD Z6, K1, Z11
	VMOVAPD Z22, K1, Z15

top2xend:
	VMOVUPD Z8, 0(DI)
	VMOVUPD Z12, 64(DI)
	VMOVUPD Z28, 128(DI)
	VMOVUPD Z9, 192(DI)
	VMOVUPD Z13, 256(DI)
	VMOVUPD Z29, 320(DI)
	VMOVUPD Z10, 384(DI)
	VMOVUPD Z14, 448(DI)
	VMOVUPD Z30, 512(DI)
	VMOVUPD Z11, 576(DI)
	VMOVUPD Z15, 640(DI)
	VMOVUPD Z31, 704(DI)

top2xnext:
	LEAQ (SI)(DX*4), SI
	ADDQ $768, DI
	SUBQ $4, CX
	JGT  top2xgroup
	VZEROUPPER
	RET


// laneTop2AVX512 reduces n states of the two-smallest kernel (24 float64
// per point: 8 lane minima, their indices, 8 lane second minima) as
// laneTop2 does, writing v1, at, v2 per point to out (3 float64 each):
// the smallest minimum, the smallest index among the lanes that hold it,
// and the smaller of that lane's second minimum and the other minima.
//
// Register use: SI state, DI out, CX points left; Z0 minima, Z1 indices,
// Z2 second minima, Z3 min broadcast, Z5 index candidates, Z6 index
// broadcast, Z7 minima with the winner's lane's second, Z4/Z8 scratch,
// Z27 +Inf.
//
// func laneTop2AVX512(st *float64, n int, out *float64)
TEXT ·laneTop2AVX512(SB), NOSPLIT, $0-24
	MOVQ st+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ out+16(FP), DI
	VBROADCASTSD kmInf<>(SB), Z27
	TESTQ CX, CX
	JLE   lt2done

lt2point:
	VMOVUPD    (SI), Z0
	VMOVUPD    64(SI), Z1
	VMOVUPD    128(SI), Z2
	VSHUFF64X2 $0x4e, Z0, Z0, Z3
	VMINPD     Z3, Z0, Z3
	VSHUFF64X2 $0xb1, Z3, Z3, Z4
	VMINPD     Z4, Z3, Z3
	VPERMILPD  $0x55, Z3, Z4
	VMINPD     Z4, Z3, Z3
	VCMPPD     $0, Z3, Z0, K1
	VMOVAPD    Z27, Z5
	VMOVAPD    Z1, K1, Z5
	VSHUFF64X2 $0x4e, Z5, Z5, Z6
	VMINPD     Z6, Z5, Z6
	VSHUFF64X2 $0xb1, Z6, Z6, Z4
	VMINPD     Z4, Z6, Z6
	VPERMILPD  $0x55, Z6, Z4
	VMINPD     Z4, Z6, Z6
	VCMPPD     $0, Z6, Z5, K2
	VMOVAPD    Z0, Z7
	VMOVAPD    Z2, K2, Z7
	VSHUFF64X2 $0x4e, Z7, Z7, Z8
	VMINPD     Z8, Z7, Z8
	VSHUFF64X2 $0xb1, Z8, Z8, Z4
	VMINPD     Z4, Z8, Z8
	VPERMILPD  $0x55, Z8, Z4
	VMINPD     Z4, Z8, Z8
	VMOVSD     X3, (DI)
	VMOVSD     X6, 8(DI)
	VMOVSD     X8, 16(DI)
	ADDQ       $192, SI
	ADDQ       $24, DI
	DECQ       CX
	JNZ        lt2point

lt2done:
	VZEROUPPER
	RET

// ruleOutAVX512 is ruleOutGo for n8 blocks of 8 groups: per block, the
// eight float32 bounds widened to float64, minus the moves, compared
// with thr (greater, ordered: a NaN is not ruled out); the groups not
// ruled out set their bits in one byte of scan, the others are folded
// into a running minimum, returned.
//
// Register use: SI lbs, DX mv, CX blocks left, DI scan; Z0 moved bounds,
// Z2 thr, Z3 running minimum, Z4 scratch, K1 ruled out, AX its bits.
//
// func ruleOutAVX512(lbs *float32, mv *float64, n8 int, thr float64, scan *uint8) float64
TEXT ·ruleOutAVX512(SB), NOSPLIT, $0-48
	MOVQ         lbs+0(FP), SI
	MOVQ         mv+8(FP), DX
	MOVQ         n8+16(FP), CX
	VBROADCASTSD thr+24(FP), Z2
	MOVQ         scan+32(FP), DI
	VBROADCASTSD kmInf<>(SB), Z3
	TESTQ        CX, CX
	JLE          roDone

roBlock:
	VCVTPS2PD (SI), Z0
	VSUBPD    (DX), Z0, Z0
	VCMPPD    $0x1e, Z2, Z0, K1
	VMINPD    Z0, Z3, K1, Z3
	KMOVW     K1, AX
	NOTL      AX
	MOVB      AX, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DX
	INCQ      DI
	DECQ      CX
	JNZ       roBlock

roDone:
	VSHUFF64X2 $0x4e, Z3, Z3, Z4
	VMINPD     Z4, Z3, Z3
	VSHUFF64X2 $0xb1, Z3, Z3, Z4
	VMINPD     Z4, Z3, Z3
	VPERMILPD  $0x55, Z3, Z4
	VMINPD     Z4, Z3, Z3
	VMOVSD     X3, ret+40(FP)
	VZEROUPPER
	RET

package kvjob

import (
	"encoding/binary"
	"slices"
	"testing"
)

func TestSumCombine(t *testing.T) {
	v := func(n uint64) []byte { return binary.AppendUvarint(nil, n) }
	got := SumCombine([]byte("k"), [][]byte{v(1), v(300), v(2)})
	if n, _ := binary.Uvarint(got[0]); len(got) != 1 || n != 303 {
		t.Fatalf("SumCombine = %v, want one value 303", got)
	}
	if n, ok := SumCounts(slices.Values([][]byte{v(5), v(1 << 40)})); !ok || n != 5+1<<40 {
		t.Fatalf("SumCounts = %d, %v", n, ok)
	}
	if _, ok := SumCounts(slices.Values([][]byte{{0x80}})); ok {
		t.Fatal("SumCounts accepted a truncated varint")
	}
}

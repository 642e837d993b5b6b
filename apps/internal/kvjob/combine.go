package kvjob

import "encoding/binary"

// SumCombine is a kvshuffle Combine that sums varint counts.
func SumCombine(_ []byte, values [][]byte) [][]byte {
	var sum uint64
	for _, v := range values {
		c, _ := binary.Uvarint(v)
		sum += c
	}
	return [][]byte{binary.AppendUvarint(nil, sum)}
}

// SumCounts sums the varint counts of one group; ok is false when a
// value is not a varint.
func SumCounts(vals func(yield func([]byte) bool)) (sum uint64, ok bool) {
	ok = true
	for v := range vals {
		c, k := binary.Uvarint(v)
		if k <= 0 {
			ok = false
		}
		sum += c
	}
	return sum, ok
}

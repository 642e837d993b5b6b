package main

import (
	"fmt"
	"io"

	"github.com/gaspigo/gaspigo/apps/terasort"
)

// valsortSummary prints validate's summary in the fields and words of
// gensort's valsort (valsort -s over the partitions' summaries reports
// the same for the whole data set):
//
//	Records: <count>                        valsort's "Records"
//	Checksum: <hex, no leading zeros>       valsort's "Checksum": the sum of the CRC-32 of
//	                                        every record (valsort sums in 128 bits, we in
//	                                        64: equal below 2^32 records)
//	Duplicate keys: <count>                 valsort's "Duplicate keys": records whose key
//	                                        equals the previous record's
//	SUCCESS - all records are in order      or the first unordered record, as valsort
//
// The last line of validate stays records=<n> checksum=<16 hex digits>.
func valsortSummary(w io.Writer, rep *terasort.Report, oe *terasort.OrderError) {
	fmt.Fprintf(w, "Records: %d\nChecksum: %x\nDuplicate keys: %d\n", rep.Records, rep.Checksum, rep.Duplicates)
	if oe == nil {
		fmt.Fprintln(w, "SUCCESS - all records are in order")
		return
	}
	fmt.Fprintf(w, "First unordered record is record %d of %s; %d unordered records\n", oe.Index, oe.Path, rep.Disorders)
}

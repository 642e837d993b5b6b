// Package points reads and writes the point files of the K-means app
// (apps/kmeans): CSV and binary point files, read a shard at a time, and
// the CSV files of centroids. Besides its own errors (FileError and the
// sentinels it wraps), it returns those of package kernel: ErrNotFinite,
// ErrRange, ErrCount, ErrShape and ErrConfig.
//
// # CSV point files
//
// CSV point files (RFC 4180, read with encoding/csv): one point per
// record, values separated by commas, each optionally quoted ("1.5", a
// quote inside doubled), surrounding blanks allowed, blank lines ignored,
// optional trailing newline, CRLF accepted, UTF-8 byte order mark ignored.
// A first non-blank record with a non-empty field that is not a number is
// a header, and skipped ("x,y,z", as spreadsheets and data-frame
// libraries write); a file with a header and quoted values gives the same
// points, bit for bit, as the plain file. The dimension is the number of
// fields of the first record, the header's if there is one. Shards count
// points (records after the header) from 0. NaN and infinities are
// rejected.
//
// A first column that is a row index is refused (ErrIndexColumn), since
// clustered as a coordinate it would outweigh the others without a word:
// one named as an index in the header (empty, as a data frame's to_csv
// writes it, or "id", "index"), or one that counts 0, 1, 2, ... (or from 1)
// over the first 1,000 points. CSVLayout.Skip (kmeans --skip-columns 1)
// leaves it out; KeepIndex (--skip-columns 0) clusters it all the same.
// CSVLayout.Sep (--sep ';', --sep tab) reads other separators; a file of
// one value per line with a semicolon, tab or bar inside is refused with
// that hint.
//
// # Binary point files
//
// Binary point files, little-endian (a file named *.bin must be one: a
// wrong magic there is an ErrHeader, not a CSV file):
//
//	offset  size  field
//	0       8     magic "GGKMPTS\x00"
//	8       4     version, uint32 = 1
//	12      4     reserved, uint32 = 0
//	16      8     n, uint64: number of points, ≥ 1
//	24      8     d, uint64: dimension, 1..65536
//	32      8·n·d float64 values, IEEE 754 bits, point-major (row-major)
//
// The file size must be exactly 32 + 8·n·d. Point i, dimension t is at
// offset 32 + 8·(i·d + t), so a rank reads its shard with one seek.
//
// # Centroid files
//
// Centroid files are CSV with exactly k lines of d values, in cluster
// order, written with strconv 'g' −1 so they round-trip exactly.
package points

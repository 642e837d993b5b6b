package kmeans

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// csvRecords yields the records of a CSV file as RFC 4180 has them
// (encoding/csv: quoted fields, doubled quotes inside them, CRLF), one
// point or centroid each, for Inspect, ReadCSVShard and ReadCentroidsCSV.
// On top of encoding/csv it drops a UTF-8 byte order mark, skips blank
// lines (only blanks, or nothing), allows blanks around a value, refuses
// lines longer than MaxLineBytes, and skips a header: a first non-blank
// record none of whose fields is a number ("x,y,z", as spreadsheets and
// data-frame libraries write; "1.0,abc" is a point with a typo, an error). Errors are *FileError
// values without Path (the caller fills it in).
type csvRecords struct {
	r      *csv.Reader
	lim    *lineLimit
	first  bool // no record returned or skipped yet
	header int  // line of the header skipped; 0: none
	d      int  // fields of the first record (header or point); 0: none yet
	dLine  int  // the line of that record
}

func newCSVRecords(r io.Reader) *csvRecords {
	br := bufio.NewReaderSize(r, 64<<10)
	if b, err := br.Peek(3); err == nil && string(b) == "\xef\xbb\xbf" {
		br.Discard(3)
	}
	lim := &lineLimit{r: br, line: 1}
	cr := csv.NewReader(lim)
	cr.FieldsPerRecord = -1 // the callers check the count and say why
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	return &csvRecords{r: cr, lim: lim, first: true}
}

// next returns the next non-blank, non-header record and the line it
// starts on; io.EOF after the last. The slice is valid until the next call.
func (c *csvRecords) next() ([]string, int, error) {
	for {
		rec, err := c.r.Read()
		if err == io.EOF {
			return nil, 0, io.EOF
		}
		if err != nil {
			return nil, 0, c.fileError(err)
		}
		line, _ := c.r.FieldPos(0)
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if c.d == 0 {
			c.d, c.dLine = len(rec), line
		}
		if c.first {
			c.first = false
			if isHeader(rec) {
				c.header = line
				continue
			}
		}
		return rec, line, nil
	}
}

// fileError turns an error of the CSV reader or the file into a *FileError
// naming the line.
func (c *csvRecords) fileError(err error) *FileError {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &FileError{Line: pe.Line, Offset: -1, Err: ErrSyntax,
			Detail: fmt.Sprintf("byte %d: %v; a quoted value follows RFC 4180: quotes around the whole value, a quote inside it doubled", pe.Column, pe.Err)}
	}
	return &FileError{Line: c.lim.line, Offset: -1, Err: err}
}

// dimension is the number of fields of the first record (the header's, if
// the file has one), with a note on where it comes from for messages.
func (c *csvRecords) dimension() (int, string) {
	if c.header != 0 {
		return c.d, fmt.Sprintf("the header, on line %d, sets the dimension", c.header)
	}
	return c.d, fmt.Sprintf("the first point, on line %d, sets the dimension", c.dLine)
}

// isHeader reports whether the first record of a file is a header: it has
// a non-empty field that is not a number. An empty field is neither (a
// line of numbers with a gap is a bad point, not a header).
func isHeader(rec []string) bool {
	names := 0
	for _, f := range rec {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if _, err := strconv.ParseFloat(f, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			return false // a number: a point, maybe with a typo elsewhere, which is an error
		}
		names++
	}
	return names > 0
}

// parseRecord appends the d values of one record to out. Errors are
// *FileError without Path and Line (the caller fills them in).
func parseRecord(out []float64, rec []string, d int) ([]float64, error) {
	if len(rec) != d {
		detail := fmt.Sprintf("got %d values, want %d", len(rec), d)
		if len(rec) > d && strings.TrimSpace(rec[len(rec)-1]) == "" {
			detail += " (a trailing comma starts an empty value)"
		}
		return out, &FileError{Offset: -1, Err: ErrColumns, Detail: detail}
	}
	for i, f := range rec {
		v, err := parseField(f, i+1)
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}

// parseField parses one CSV value (surrounding blanks allowed).
func parseField(field string, col int) (float64, error) {
	field = strings.Trim(field, " \t\r\n")
	if len(field) == 0 {
		return 0, &FileError{Offset: -1, Err: ErrSyntax, Detail: fmt.Sprintf("column %d is empty", col)}
	}
	v, err := strconv.ParseFloat(field, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) && (math.IsInf(v, 0)) {
			return 0, &FileError{Offset: -1, Err: ErrNotFinite,
				Detail: fmt.Sprintf("column %d, %s, is beyond the float64 range", col, quoteField(field))}
		}
		if !errors.Is(err, strconv.ErrRange) {
			return 0, &FileError{Offset: -1, Err: ErrSyntax,
				Detail: fmt.Sprintf("column %d is %s, want a decimal number such as -1.25e3", col, quoteField(field))}
		}
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, &FileError{Offset: -1, Err: ErrNotFinite,
			Detail: fmt.Sprintf("column %d is %s; NaN and infinities are not allowed", col, quoteField(field))}
	}
	return v, nil
}

// quoteField quotes (a prefix of) a field for an error message.
func quoteField(s string) string {
	const maxLen = 40
	if len(s) > maxLen {
		return strconv.Quote(s[:maxLen]) + "..."
	}
	return strconv.Quote(s)
}

// lineLimit passes a file through, counting its lines, and fails with
// ErrLineTooLong once a line exceeds MaxLineBytes (a file that is not CSV
// at all would otherwise be read into memory as one line).
type lineLimit struct {
	r    io.Reader
	line int // 1-based number of the line being read
	run  int // bytes of that line so far, without its '\n'
}

func (l *lineLimit) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for i := 0; i < n; {
		j := bytes.IndexByte(p[i:n], '\n')
		end := n
		if j >= 0 {
			end = i + j
		}
		if l.run+end-i > MaxLineBytes {
			return i, fmt.Errorf("%w: longer than %d bytes (is this really a CSV file?)", ErrLineTooLong, MaxLineBytes)
		}
		if j < 0 {
			l.run += end - i
			break
		}
		l.run = 0
		l.line++
		i = end + 1
	}
	return n, err
}

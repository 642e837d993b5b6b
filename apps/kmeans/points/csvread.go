package points

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
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
	// Lines without a quote are split here, as encoding/csv would split
	// them (the fast path: encoding/csv costs half as much again on a
	// large file); from the first line with a quote on, encoding/csv
	// reads the rest (r, over lim, its line 1 being line base+1).
	br     *bufio.Reader
	sep    string
	trim   bool     // drop blanks before a value (unless the separator is one)
	line   int      // the fast path's next line
	long   []byte   // a line longer than br's buffer
	fields []string // the fast path's record, reused
	r      *csv.Reader
	lim    *lineLimit
	base   int

	skip   int  // leading fields dropped from every record (CSVLayout.Skip)
	first  bool // no record returned or skipped yet
	header int  // line of the header skipped; 0: none
	head   []string
	d      int // fields of the first record (header or point), skipped ones left out; 0: none yet
	dLine  int // the line of that record
}

// CSVLayout is how a CSV point file is laid out beyond one point per
// line, comma-separated: the zero value is that, and a first column that
// looks like a row index (see Inspect) is refused.
type CSVLayout struct {
	// Sep separates the values (0: a comma); a file with another
	// separator is refused, with a hint, as long as Sep is a comma.
	Sep rune
	// Skip leading columns of every line are not coordinates: an index
	// or id column (as a data-frame library writes by default).
	Skip int
	// KeepIndex says that the columns after the skipped ones are all
	// coordinates, even a first one that looks like a row index: the
	// check is off (the command line sets it with --skip-columns).
	KeepIndex bool
}

// Validate checks the layout's settings.
func (l CSVLayout) Validate() error {
	switch {
	case l.Skip < 0:
		return configErr("--skip-columns %d: want 0 or more", l.Skip)
	case l.Sep == '"' || l.Sep == '\r' || l.Sep == '\n' || l.Sep == utf8.RuneError || l.Sep != 0 && !utf8.ValidRune(l.Sep):
		return configErr("--sep %q cannot separate values: use one character such as ';' or tab", l.Sep)
	}
	return nil
}

func (l CSVLayout) sep() rune {
	if l.Sep == 0 {
		return ','
	}
	return l.Sep
}

func newCSVRecords(r io.Reader, l CSVLayout) *csvRecords {
	br := bufio.NewReaderSize(r, 64<<10)
	if b, err := br.Peek(3); err == nil && string(b) == "\xef\xbb\xbf" {
		br.Discard(3)
	}
	return &csvRecords{br: br, sep: string(l.sep()), trim: !unicode.IsSpace(l.sep()), line: 1, skip: l.Skip, first: true}
}

// next returns the next non-blank, non-header record and the line it
// starts on; io.EOF after the last. The slice is valid until the next call.
func (c *csvRecords) next() ([]string, int, error) {
	for {
		rec, line, err := c.read()
		if err != nil {
			return nil, 0, err
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if len(rec) <= c.skip {
			return nil, 0, &FileError{Line: line, Offset: -1, Err: ErrColumns,
				Detail: fmt.Sprintf("%d values, and --skip-columns %d leaves none", len(rec), c.skip)}
		}
		if c.d == 0 {
			c.d, c.dLine = len(rec)-c.skip, line
		}
		if c.first {
			c.first = false
			if isHeader(rec[c.skip:]) || indexHeader(rec) {
				c.header = line
				c.head = make([]string, len(rec))
				for i, f := range rec {
					c.head[i] = strings.Clone(f)
				}
				continue
			}
		}
		return rec[c.skip:], line, nil
	}
}

// read returns the next record and its line, empty lines skipped (as
// encoding/csv does); io.EOF after the last; other errors are *FileError.
func (c *csvRecords) read() ([]string, int, error) {
	if c.r != nil {
		rec, err := c.r.Read()
		if err == io.EOF {
			return nil, 0, io.EOF
		}
		if err != nil {
			return nil, 0, c.fileError(err)
		}
		line, _ := c.r.FieldPos(0)
		return rec, c.base + line, nil
	}
	for {
		b, nl, err := c.readLine()
		if err != nil {
			return nil, 0, err
		}
		line := c.line
		c.line++
		if bytes.IndexByte(b, '"') >= 0 {
			c.startRFC4180(b, nl, line)
			return c.read()
		}
		if len(b) == 0 {
			continue
		}
		// The fields alias the reader's buffer, as the record may until
		// the next call (next clones the header, the one it keeps).
		return c.split(unsafe.String(&b[0], len(b))), line, nil
	}
}

// readLine returns the next line without its end ("\n", "\r\n", or a
// last line's "\r"), nl
// whether it had one, io.EOF at the end, and ErrLineTooLong (as a
// *FileError) for a line longer than MaxLineBytes. The bytes are valid
// until the next read.
func (c *csvRecords) readLine() (b []byte, nl bool, err error) {
	b, err = c.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		c.long = append(c.long[:0], b...)
		for err == bufio.ErrBufferFull && len(c.long) <= MaxLineBytes {
			b, err = c.br.ReadSlice('\n')
			c.long = append(c.long, b...)
		}
		b = c.long
	}
	nl = len(b) > 0 && b[len(b)-1] == '\n'
	if nl {
		b = b[:len(b)-1]
	}
	if (nl || err == io.EOF) && len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1] // as encoding/csv: also a last line's "\r"
	}
	switch {
	case len(b) > MaxLineBytes:
		return nil, false, &FileError{Line: c.line, Offset: -1,
			Err: fmt.Errorf("%w: longer than %d bytes (is this really a CSV file?)", ErrLineTooLong, MaxLineBytes)}
	case err == io.EOF && len(b) == 0 && !nl:
		return nil, false, io.EOF
	case err != nil && err != io.EOF:
		return nil, false, &FileError{Line: c.line, Offset: -1, Err: err}
	}
	return b, nl, nil
}

// split cuts an unquoted line into its fields, as encoding/csv does.
func (c *csvRecords) split(line string) []string {
	c.fields = c.fields[:0]
	for {
		i := strings.Index(line, c.sep)
		f := line
		if i >= 0 {
			f = line[:i]
		}
		if c.trim && f != "" && (f[0] >= utf8.RuneSelf || asciiSpace(f[0])) {
			f = strings.TrimLeftFunc(f, unicode.IsSpace)
		}
		c.fields = append(c.fields, f)
		if i < 0 {
			return c.fields
		}
		line = line[i+len(c.sep):]
	}
}

// startRFC4180 hands the rest of the file, from line (whose bytes are b,
// nl whether a newline ended it), to encoding/csv.
func (c *csvRecords) startRFC4180(b []byte, nl bool, line int) {
	pending := slices.Clone(b)
	if nl {
		pending = append(pending, '\n')
	}
	c.lim = &lineLimit{r: io.MultiReader(bytes.NewReader(pending), c.br), line: line}
	c.base = line - 1
	cr := csv.NewReader(c.lim)
	cr.Comma, _ = utf8.DecodeRuneInString(c.sep)
	cr.FieldsPerRecord = -1 // the callers check the count and say why
	// Blanks before a value (and a quote) are allowed, unless the
	// separator is one: it would be eaten with them.
	cr.TrimLeadingSpace = c.trim
	cr.ReuseRecord = true
	c.r = cr
}

// fileError turns an error of the CSV reader or the file into a *FileError
// naming the line.
func (c *csvRecords) fileError(err error) *FileError {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &FileError{Line: c.base + pe.Line, Offset: -1, Err: ErrSyntax,
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

// indexHeader reports whether the first record of a file is the header a
// data-frame library writes with its index: an empty first field, then a
// name for every column, numbers included (",0,1" for unnamed columns).
func indexHeader(rec []string) bool {
	if len(rec) < 2 || strings.TrimSpace(rec[0]) != "" {
		return false
	}
	for _, f := range rec[1:] {
		if strings.TrimSpace(f) == "" {
			return false
		}
	}
	return true
}

// indexProbe is how many points the check for an index column looks at.
const indexProbe = 1000

// indexWatch looks at the first column of a file's first points for a row
// index: the numbers 0, 1, 2, ... or 1, 2, 3, ... in order.
type indexWatch struct {
	seen, first int
	base        float64
	broken      bool
}

func (w *indexWatch) add(field string, line int) {
	if w.broken || w.seen >= indexProbe {
		return
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(field), 64)
	if w.seen == 0 {
		w.base, w.first = v, line
	}
	if err != nil || (w.base != 0 && w.base != 1) || v != w.base+float64(w.seen) {
		w.broken = true
		return
	}
	w.seen++
}

// indexColumn returns the error for a file whose first column is a row
// index or named as one (head: the header, nil when none), or nil.
func indexColumn(head []string, headLine int, w *indexWatch, d int) error {
	why, line := "", 0
	if len(head) > 0 {
		switch name := strings.TrimSpace(head[0]); strings.ToLower(name) {
		case "", "id", "index", "unnamed: 0":
			why, line = fmt.Sprintf("its header is %q, an index's name", name), headLine
		}
	}
	if why == "" && !w.broken && w.seen >= 3 {
		why, line = fmt.Sprintf("it counts %g, %g, %g, ... down the lines", w.base, w.base+1, w.base+2), w.first
	}
	if why == "" || d < 2 {
		return nil
	}
	return &FileError{Line: line, Offset: -1, Err: ErrIndexColumn,
		Detail: fmt.Sprintf("%s, not a coordinate: give --skip-columns 1 to leave it out (or --skip-columns 0 to cluster it all the same)", why)}
}

// separatorHint returns the error for a file whose points are one value
// each, with another separator inside it (rec: the first point), or nil.
func separatorHint(rec []string, l CSVLayout) error {
	if len(rec) != 1 || l.sep() != ',' {
		return nil
	}
	for _, sep := range []struct{ in, name, flag string }{{";", "semicolons", "';'"}, {"\t", "tabs", "tab"}, {"|", "bars", "'|'"}} {
		if strings.Contains(rec[0], sep.in) {
			return &FileError{Offset: -1, Err: ErrColumns,
				Detail: fmt.Sprintf("one value per line with %s inside it: give --sep %s", sep.name, sep.flag)}
		}
	}
	return nil
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

// asciiSpace reports whether b is an ASCII blank (unicode.IsSpace).
func asciiSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r'
}

// parseField parses one CSV value (surrounding blanks allowed).
func parseField(field string, col int) (float64, error) {
	for field != "" && (field[0] == ' ' || field[0] == '\t' || field[0] == '\r' || field[0] == '\n') {
		field = field[1:]
	}
	for n := len(field); n > 0 && (field[n-1] == ' ' || field[n-1] == '\t' || field[n-1] == '\r' || field[n-1] == '\n'); n = len(field) {
		field = field[:n-1]
	}
	if len(field) == 0 {
		return 0, &FileError{Offset: -1, Err: ErrSyntax, Detail: fmt.Sprintf("column %d is empty", col)}
	}
	v, err := strconv.ParseFloat(field, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) && (math.IsInf(v, 0)) {
			return 0, &FileError{Offset: -1, Err: kernel.ErrNotFinite,
				Detail: fmt.Sprintf("column %d, %s, is beyond the float64 range", col, quoteField(field))}
		}
		if !errors.Is(err, strconv.ErrRange) {
			return 0, &FileError{Offset: -1, Err: ErrSyntax,
				Detail: fmt.Sprintf("column %d is %s, want a decimal number such as -1.25e3", col, quoteField(field))}
		}
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, &FileError{Offset: -1, Err: kernel.ErrNotFinite,
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

package chaos

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// Record is one structured log record of a job's process: its attributes
// by key (msg, level, proc, epoch, ...). The suite reads what the
// processes report (a view applied, a Raft leader elected, a failure
// confirmed or committed) from records by key, never by matching a
// formatted line: the order of a record's attributes is the logger's
// business (job adds "layer" before spares adds "proc", for one).
type Record map[string]string

// The messages of the records the suite reads.
const (
	msgViewApplied      = "view applied"                                                         // pgas: proc, epoch, rank, failed, moved, table
	msgBecameLeader     = "spares: became raft leader"                                           // spares: proc, epoch
	msgFailureConfirmed = "failure confirmed"                                                    // pgas: a survivor's detector confirmed a failure
	msgFailureCommitted = "spares: failure committed"                                            // spares: failed_proc, epoch
	msgRuntimeClosed    = "runtime closed"                                                       // pgas: proc, stale_applied
	msgRecovered        = "recovered"                                                            // TeraSort: a rank recovered
	msgRuleInForce      = "netfault: rule in force"                                              // netfault: proc, rule ("none": healed)
	msgStretched        = "membership timeouts stretched for the job's most oversubscribed host" // job: factor
	msgJoined           = "a process joined the job"                                             // pgas: proc, joiner (its new id), addr, host, epoch
	attrFailedProc      = "failed_proc"                                                          // of msgFailureCommitted
	attrJoiner          = "joiner"                                                               // of msgJoined
	attrPromoted        = "promoted"                                                             // of msgFailureCommitted: the spare that takes the failed process's rank
	attrStaleApplied    = "stale_applied"                                                        // of msgRuntimeClosed
)

// ParseRecord reads the record of one output line, in slog's text form
// (logfmt: key=value, values quoted where needed) or its JSON form, after
// a role prefix ("[r2] ", "[s5] ", "[p1] ") if the line has one. ok is
// false for a line that is no record (no msg attribute): a program's own
// output, the harness's notes.
func ParseRecord(line string) (Record, bool) {
	s := line
	if strings.HasPrefix(s, "[") {
		// gaspirun's "[r2] " (or "[r0-3,s5] " for collapsed lines),
		// proctest.Line's "[p2] ".
		if i := strings.Index(s, "] "); i > 0 && !strings.ContainsAny(s[:i], " =\"{") {
			s = s[i+2:]
		}
	}
	rec := Record{}
	switch {
	case strings.HasPrefix(s, "{"):
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var m map[string]any
		if d.Decode(&m) != nil {
			return nil, false
		}
		for k, v := range m {
			switch v := v.(type) {
			case string:
				rec[k] = v
			case json.Number:
				rec[k] = v.String()
			default:
				rec[k] = fmt.Sprint(v)
			}
		}
	case strings.Contains(s, "msg="):
		proctest.ParseKV(s, rec)
	default:
		return nil, false
	}
	if _, ok := rec["msg"]; !ok {
		return nil, false
	}
	return rec, true
}

// Msg is the record's message ("" for no record).
func (r Record) Msg() string { return r["msg"] }

// Int is the record's attribute key as an integer.
func (r Record) Int(key string) (int, bool) {
	n, err := strconv.Atoi(r[key])
	return n, err == nil
}

// LeaderOf reports the process that the record of line says won a Raft
// election (the membership's "spares: became raft leader", whose proc is
// the winner).
func LeaderOf(line string) (proc int, ok bool) {
	r, ok := ParseRecord(line)
	if !ok || r.Msg() != msgBecameLeader {
		return -1, false
	}
	return r.Int("proc")
}

// recordsOf parses every line that holds a record, nil where one holds
// none, for the checks that read a finished job's output.
func recordsOf(lines []string) []Record {
	out := make([]Record, len(lines))
	for i, l := range lines {
		if r, ok := ParseRecord(l); ok {
			out[i] = r
		}
	}
	return out
}

// isMsg reports whether line holds a record with message msg.
func isMsg(line, msg string) bool {
	r, ok := ParseRecord(line)
	return ok && r.Msg() == msg
}

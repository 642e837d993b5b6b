package proctest

import (
	"reflect"
	"testing"
)

func TestParseKV(t *testing.T) {
	kv := map[string]string{}
	ParseKV(`time=2026-11-21T08:00:00Z level=INFO msg="view applied" proc=3 epoch=2 word failed="[1 \"x\" 2]" proc=9 tail="unterminated`, kv)
	want := map[string]string{
		"time": "2026-11-21T08:00:00Z", "level": "INFO", "msg": "view applied", "proc": "3",
		"epoch": "2", "failed": `[1 "x" 2]`, "tail": `"unterminated`,
	}
	if !reflect.DeepEqual(kv, want) {
		t.Fatalf("ParseKV = %v\nwant     %v", kv, want)
	}
}

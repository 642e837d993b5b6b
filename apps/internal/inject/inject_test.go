package inject

import (
	"errors"
	"strings"
	"testing"
)

var testGrammar = &Grammar{Keys: []Key{
	{Name: "rank", Kind: Rank, Target: true},
	{Name: "host", Kind: Label, Target: true},
	{Name: "leader", Kind: Flag, Target: true},
	{Name: "iter", Kind: Count},
	{Name: "at", Kind: Fraction},
	{Name: "phase", Kind: Word, Words: []string{"commit", "ckpt-new"}},
}, Want: "kill:rank=R,iter=I"}

// Parse takes the kills the grammar allows, with their values typed, and
// refuses anything else with a message naming the flag, what is wrong
// and the accepted forms (ErrInject).
func TestParse(t *testing.T) {
	k, err := Parse("kill:rank=3,iter=12,phase=commit", testGrammar)
	if err != nil {
		t.Fatal(err)
	}
	if k.Int("rank") != 3 || k.Int("iter") != 12 || k.Text("phase") != "commit" || k.Has("host") || k.Int("host") != -1 || k.Float("at") != -1 {
		t.Fatalf("parsed %+v", k.vals)
	}
	if k, err := Parse("kill:leader,at=0.25", testGrammar); err != nil || !k.Has("leader") || k.Float("at") != 0.25 {
		t.Fatalf("kill:leader,at=0.25: %v", err)
	}
	for s, why := range map[string]string{
		"rank=1,iter=2":             "only kill injections exist",
		"kill:":                     "only kill injections exist",
		"kill:rank=1,bogus=2":       `unknown key "bogus"`,
		"kill:rank=1,rank=2":        "rank is given twice",
		"kill:rank":                 "rank needs a value",
		"kill:leader=1":             "leader takes no value",
		"kill:rank=-1":              "want a whole number >= 0",
		"kill:rank=1,iter=x":        "want a whole number >= 0",
		"kill:rank=1,at=1.5":        "want a fraction in [0, 1]",
		"kill:host=":                "want a non-empty label",
		"kill:rank=1,phase=restore": "want one of commit, ckpt-new",
		"kill:iter=3":               "name exactly one target",
		"kill:rank=1,leader":        "name exactly one target",
	} {
		_, err := Parse(s, testGrammar)
		if !errors.Is(err, ErrInject) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), s) || !strings.Contains(err.Error(), "want kill:rank=R,iter=I") {
			t.Errorf("Parse(%q) = %v, want an ErrInject saying %q", s, err, why)
		}
	}
}

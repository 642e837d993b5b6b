// Package inject is the applications' one helper for --inject: a real
// SIGKILL of the process that holds a rank, at a point of its progress,
// written in one small language, kill:KEY[=VALUE],... Each application
// gives its Grammar (which keys it has and what their values are); Parse
// checks a flag against it and Fire carries the kill out.
package inject

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ErrInject is wrapped by every error Parse returns: the flag is wrong.
var ErrInject = errors.New("bad --inject")

// Kind is what a key's value is.
type Kind int

const (
	// Flag is a key with no value (kill:leader).
	Flag Kind = iota
	// Rank is a rank, a whole number from 0.
	Rank
	// Count is a whole number from 0 (an iteration, a record).
	Count
	// Fraction is a number in [0, 1] (a share of the input).
	Fraction
	// Label is a non-empty string (a host label).
	Label
	// Word is one of the Key's Words.
	Word
)

// Key is one key of a Grammar.
type Key struct {
	Name  string
	Kind  Kind
	Words []string // for Word: the values allowed
	// Target marks the keys that name whom to kill: a kill names
	// exactly one of them.
	Target bool
}

// Grammar is an application's kill language.
type Grammar struct {
	Keys []Key
	// Want shows the accepted forms, for the error messages.
	Want string
}

// Kill is a parsed kill: the value of each key given.
type Kill struct {
	text string
	vals map[string]string
	g    *Grammar
}

// Parse parses s against g: the prefix kill:, known keys each given at
// most once with a value of its kind, and exactly one target key when g
// has any. Whatever else an application requires (a key that must come
// with another) it checks on the Kill, with Errorf for the message.
func Parse(s string, g *Grammar) (*Kill, error) { return ParseVerb(s, "kill", g) }

// ParseVerb is Parse for an injection of another verb than kill (K-means's
// store:..., a rank that keeps storing into a peer's memory): the prefix
// is verb and a colon.
func ParseVerb(s, verb string, g *Grammar) (*Kill, error) {
	k := &Kill{text: s, vals: map[string]string{}, g: g}
	rest, ok := strings.CutPrefix(s, verb+":")
	if !ok || rest == "" {
		return nil, k.Errorf("only %s injections exist", verb)
	}
	targets, hasTargets := 0, false
	for _, key := range g.Keys {
		hasTargets = hasTargets || key.Target
	}
	for _, kv := range strings.Split(rest, ",") {
		name, v, hasVal := strings.Cut(kv, "=")
		i := slices.IndexFunc(g.Keys, func(key Key) bool { return key.Name == name })
		if i < 0 {
			return nil, k.Errorf("unknown key %q", name)
		}
		key := g.Keys[i]
		if _, dup := k.vals[name]; dup {
			return nil, k.Errorf("%s is given twice", name)
		}
		if (key.Kind == Flag) == hasVal {
			if hasVal {
				return nil, k.Errorf("%s takes no value", name)
			}
			return nil, k.Errorf("%s needs a value: %s=...", name, name)
		}
		if err := check(key, v); err != nil {
			return nil, k.Errorf("%s %q: %v", name, v, err)
		}
		k.vals[name] = v
		if key.Target {
			targets++
		}
	}
	if hasTargets && targets != 1 {
		var names []string
		for _, key := range g.Keys {
			if key.Target {
				names = append(names, key.Name)
			}
		}
		return nil, k.Errorf("name exactly one target: %s", strings.Join(names, ", "))
	}
	return k, nil
}

func check(key Key, v string) error {
	switch key.Kind {
	case Rank, Count:
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			if key.Kind == Rank {
				return errors.New("ranks count from 0: want a whole number >= 0")
			}
			return errors.New("want a whole number >= 0")
		}
	case Fraction:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1 {
			return errors.New("want a fraction in [0, 1]")
		}
	case Label:
		if v == "" {
			return errors.New("want a non-empty label")
		}
	case Word:
		if !slices.Contains(key.Words, v) {
			return fmt.Errorf("want one of %s", strings.Join(key.Words, ", "))
		}
	}
	return nil
}

// Has reports whether key was given.
func (k *Kill) Has(key string) bool {
	_, ok := k.vals[key]
	return ok
}

// Int is the value of a Rank or Count key, and -1 when it was not given.
func (k *Kill) Int(key string) int {
	v, ok := k.vals[key]
	if !ok {
		return -1
	}
	n, _ := strconv.Atoi(v) // checked by Parse
	return n
}

// Float is the value of a Fraction key, and -1 when it was not given.
func (k *Kill) Float(key string) float64 {
	v, ok := k.vals[key]
	if !ok {
		return -1
	}
	f, _ := strconv.ParseFloat(v, 64) // checked by Parse
	return f
}

// Text is the value of a Label or Word key, "" when it was not given.
func (k *Kill) Text(key string) string { return k.vals[key] }

// Errorf is an error about this kill: the flag, why, and the accepted
// forms. It wraps ErrInject.
func (k *Kill) Errorf(format string, args ...any) error {
	return &flagError{fmt.Sprintf("--inject %q: %s (want %s)", k.text, fmt.Sprintf(format, args...), k.g.Want)}
}

// flagError is Errorf's error: its message, and ErrInject for errors.Is.
type flagError struct{ msg string }

func (e *flagError) Error() string { return e.msg }
func (e *flagError) Unwrap() error { return ErrInject }

// Fire prints what it does on out ("inject: SIGKILL rank R (pid P)
// progress") and sends SIGKILL to this process; it never returns.
func Fire(out io.Writer, rank int, progress string) {
	fmt.Fprintf(out, "inject: SIGKILL rank %d (pid %d) %s\n", rank, os.Getpid(), progress)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// Package doccheck keeps the repository's documents honest. It holds tests
// only: they read README.md, docs/*.md and bench/RESULTS.md and fail when
//
//   - a Markdown table has rows without a header and delimiter row (a blank
//     line inside a table splits it, and its second half renders as raw
//     pipes);
//   - README.md is longer than 200 lines (the manual lives in docs/);
//   - a path they name (in code, in a `go test`/`go run` package argument,
//     or as a link target) does not exist in the repository, or a link's
//     #fragment names no heading of the Markdown file it points to;
//   - a command of a shell block (sh, bash, shell) is neither a program of the repository
//     (a main package under cmd/, apps/, bench/ or test/, run
//     as bin/NAME or by name), nor a script of the repository, nor one of
//     the system tools the test lists;
//   - a go test -run in them names a test function no test file has;
//   - the program README.md shows under "Writing a program" differs from
//     the body of Example in example_test.go, which go test compiles.
//
// The tests read files and parse Go package clauses; they build and run
// nothing, so they take milliseconds.
package doccheck

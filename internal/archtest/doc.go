// Package archtest holds the import-graph test of the module: the
// directions of docs/design.md §1 (segments is a leaf; transport below health
// below pgas; spares and ckpt siblings above pgas; kvshuffle above ckpt;
// job, the composition root, above spares; apps, commands, benchmarks and
// tests on top), checked with `go list` over every package of the module.
// It has no code of its own; see arch_test.go for the rules.
package archtest

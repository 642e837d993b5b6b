// Package terasort is the data side of the TeraSort app: gensort-format
// records, a parallel counter-based generator, a streaming block reader
// that checks sizes, validation (global order, record count, checksum),
// range partitioning by sampled splitters, and a single-process in-memory
// sort used as the baseline. The distributed sort (command `terasort
// sort`, run under gaspirun) is built on kvshuffle and uses these pieces;
// see "The distributed sort" below.
//
// # Records
//
// A record is 100 bytes; its first 10 bytes are the key, compared as
// unsigned bytes (bytes.Compare; CompareKeys is a faster equivalent). The
// generator writes gensort's two layouts (offsets in bytes):
//
//	ascii (gensort -a, the default of `terasort gen`):
//	  0-9    key: 10 printable characters ' '..'~' (95 values each)
//	  10-11  two spaces
//	  12-43  row id: the record's global index i as 32 upper-case hex digits
//	  44-45  two spaces
//	  46-97  filler: 13 groups of 4 equal hex digits, from random bits
//	  98-99  "\r\n"
//
//	binary (gensort's default; `terasort gen --format binary`):
//	  0-9    key: 10 random bytes (any value, including '\n')
//	  10-11  0x00 0x11
//	  12-43  row id: i as 32 upper-case hex digits
//	  44-47  0x88 0x99 0xAA 0xBB
//	  48-95  filler: 12 groups of 4 equal hex digits, from random bits
//	  96-99  0xCC 0xDD 0xEE 0xFF
//
// ASCII records contain no '\n' except the last byte, so line tools sort
// them too: `LC_ALL=C sort` orders lines by all 99 bytes before the '\n',
// which orders keys correctly (ties broken by the row id). The layouts are
// gensort's, but the random numbers are not: gensort uses one fixed
// 128-bit generator, this package derives record i's 128 random bits from
// (seed, i) by two splitmix64 finalizers (mix64(k0 + i·c0), mix64(k1 +
// i·c1), with k0, k1 derived from the seed). So record i depends only on
// the seed, the format and i, any range can be generated on its own
// (GenRecords, PartRange), and the output is byte-identical whatever the
// number of parts or workers. The first 8 key bytes of a binary record
// are a bijection of i, so binary keys never repeat within a data set.
//
// # Files
//
// A data set is a directory of part files part-00000, part-00001, ...
// (PartName, at most MaxParts), taken in part order, or a single file.
// Every file must be a whole number of records: a file of another size is
// reported as a *FileError wrapping ErrSize with the file's path and the
// offset of the cut record, before anything is read. Empty parts are legal.
//
// # Checksum
//
// Summary is the record count and the sum modulo 2^64 of the CRC-32
// (IEEE) of every 100-byte record, as Hadoop's TeraValidate computes it
// (there with a 128-bit sum). It does not depend on order, so the input of
// a sort and its output must have the same Summary. The CLI prints it as
// its last line: "records=<n> checksum=<16 hex digits>".
//
// # Usage
//
//	sum, err := terasort.Generate(ctx, "in", cfg)            // cfg := terasort.DefaultGenConfig(); cfg.Records = n
//	paths, err := terasort.ListParts("out")
//	rep, err := terasort.ValidateFiles(ctx, paths, terasort.DefaultScanConfig())
//	var oe *terasort.OrderError                             // errors.As(err, &oe): which file, which record
//	err = terasort.Expect{Checksum: sum.Checksum, CheckChecksum: true}.Check(rep.Summary)
//
// Reading a stream in blocks, with no allocation per record:
//
//	rd := terasort.NewReader(f, path, 0)
//	for {
//		blk, err := rd.Next()       // whole records; io.EOF at the end; *FileError if cut
//		if err != nil { ... }
//		for off := 0; off < len(blk); off += terasort.RecordSize {
//			rec := blk[off : off+terasort.RecordSize]
//			_ = terasort.Key(rec)
//		}
//	}
//
// # The distributed sort
//
// `terasort sort --in DIR --out DIR` runs under gaspirun, one process per
// rank, over kvshuffle (docs/design.md §8). The input's files (any
// number) are one sequence of records; rank r takes the records
// PartRange(total, ranks, r) of it as byte ranges on record boundaries
// (SplitInputs, Shard), so files and ranks need not match. Every rank
// samples its range (SampleShards), kvshuffle.SampleSplitters allgathers
// the samples and picks the same splitters everywhere, and every record is
// sent to NewPartitioner(splitters).Partition(Key(rec)) as one pair: key =
// the whole record, value empty (the same framed size as a 10-byte key
// with a 90-byte value, one slice fewer per pair, and a total order, so
// the output does not depend on timing or failures). Rank r writes the
// records it receives, in order, to out/PartName(r); once every part is
// in place rank 0 writes the marker out/SuccessName (WriteSuccess: the
// parts, their record counts, the total count and checksum) and prints the
// Summary of all parts, which `terasort sum` of the input must match, and
// `terasort validate out` checks the marker (ReadSuccess) and the order.
// out must be new or empty and apart from the input (PlanOutput; with
// --replace a previous sort's output is removed first). --memory and --spill are
// kvshuffle's MemoryBudget and SpillDir (default: the output directory);
// spill files and the output are written around the page cache
// (O_DIRECT) where the file system allows, unless --page-cache.
// With --ckpt-records C the sort takes key-count checkpoints after every C
// records sent, asynchronously (kvshuffle Mark in the send loop, which
// goes on at once; a committer goroutine takes kvshuffle State and commits
// it with package ckpt, and the send loop waits for that commit only at
// the next checkpoint; the data held in memory at the cut is spilled in
// the background, or with --ckpt-in-memory carried in the state, which
// package ckpt mirrors; spill files a checkpoint names are copied to the
// rank's mirror holder when that is on another host)
// and, under gaspirun --spares, survives the loss of a rank: the survivors
// Recover, every rank restores the last checkpoint, rolls the shuffle back
// and resumes sending at Consumed() (ReadShards reads from any record).
// DistSort is one rank's part of it (DistConfig: the settings, the same on
// every rank); cmd/terasort/sort.go turns the flags into a DistConfig and
// has the details. The recovery loop is package apps/internal/recovery's,
// shared with K-means. Faults are the command's business: DistConfig.Inject
// asks it, once per rank, for an Injection (a record index and a Fire
// function, given the rank's Shuffle, e.g. for LoseSpillDir); the library
// itself never kills a process.
//
// # In-memory sort
//
// SortInMemory extracts each record's key and index into a 16-byte entry,
// distributes the entries by their first two key bytes (stable, in
// parallel), sorts each bucket by a byte-wise radix sort (no
// data-dependent branches) and gathers the records from the source in the
// sorted order. The gather reads 100 bytes at random positions of the
// source and dominates a warm sort; a cold one (fresh memory) is dominated
// by page faults. AllocBuffer (and SortConfig.HugePages) give buffers
// aligned to 2 MiB and advised with MADV_HUGEPAGE, which reduces TLB misses
// where the kernel and hypervisor back them with huge pages; on the VMs
// measured so far the faults cost more than that saves, so it is off by
// default (bench.sh measures both).
//
// # Concurrency and ownership
//
// Generate, GenerateFile, ValidateFiles, SumFiles and SortInMemory start
// their goroutines (Workers or Threads of them) and join them all before
// they return; a cancelled ctx stops the first four at the next block. A
// Reader is used by one goroutine at a time, and the block it returns is
// valid until its next Next. A Partitioner is immutable and may be shared.
// A Buffer is owned by its creator, who closes it; Close is idempotent.
// SortInMemory reads src and writes dst, which must not overlap and must
// not be touched by others during the call.
package terasort

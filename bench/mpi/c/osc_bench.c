/*
 * osc_bench: the tests of gaspibench, in MPI, for comparison with Open MPI
 * (bench/mpi runs it; see bench/RESULTS.md). Build: mpicc -O2 -o osc_bench
 * osc_bench.c. Run: mpirun -np 2 ./osc_bench [min_time_seconds].
 *
 * One-sided tests run from rank 0 to rank 1 on a window allocated with
 * MPI_Win_allocate under MPI_Win_lock_all (passive target); the others
 * wait. Collectives run over every rank. Rank 0 prints one CSV line per
 * measurement:
 *
 *   mpi,TEST,RANKS,SIZE_BYTES,WINDOW,ITERS,VALUE
 *
 *   put          MiB/s: WINDOW MPI_Puts of SIZE bytes, then MPI_Win_flush
 *   put_flush    median microseconds of one 8-byte MPI_Put + MPI_Win_flush
 *   rate         MiB/s of 8-byte puts, WINDOW (64) of them per flush
 *   allreduce    median microseconds of an MPI_Allreduce of SIZE/8 doubles (sum)
 *   barrier      median microseconds of an MPI_Barrier
 *
 * Each measurement runs 10 untimed iterations, then timed chunks of 20,
 * 40, 80... iterations until rank 0 has spent min_time (0.2 s by default)
 * in them; rank 0 decides between chunks and broadcasts it.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP 10
#define MIN_ITERS 20
#define MAX_ITERS 1000000
#define MAX_SIZE (4 << 20)
#define WINDOW_BYTES (8 << 20)

static int rank, nranks;
static double min_time = 0.2;
static MPI_Win win;
static char *src;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median_us(double *s, int n)
{
	qsort(s, n, sizeof *s, cmp_double);
	return s[n / 2] * 1e6;
}

/* A step runs iters iterations of one measurement from sample index
 * first, storing per-iteration seconds in s (when s is not NULL), and
 * returns the seconds it took on this rank. */
typedef double (*step)(int iters, double *s, int first, void *arg);

/* measure runs WARMUP untimed iterations of f, then timed chunks (20
 * iterations, then doubling) until rank 0 has spent min_time in them or
 * MAX_ITERS are done; rank 0 decides after each chunk and broadcasts it,
 * outside the timing. It returns the iterations and rank 0's total
 * seconds, and the samples in *s when samples is set. */
static int measure(step f, void *arg, int samples, double **s, double *total)
{
	f(WARMUP, NULL, 0, arg);
	int n = 0, cap = 0, chunk = MIN_ITERS;
	double *buf = NULL;
	*total = 0;
	for (;;) {
		if (samples && n + chunk > cap) {
			cap = 2 * (n + chunk);
			buf = realloc(buf, sizeof *buf * cap);
		}
		*total += f(chunk, samples ? buf : NULL, n, arg);
		n += chunk;
		int more = *total < min_time && n + chunk * 2 <= MAX_ITERS;
		MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
		if (!more)
			break;
		chunk *= 2;
	}
	if (s)
		*s = buf;
	else
		free(buf);
	return n;
}

struct puts_arg {
	int size, window;
};

/* post_puts posts window puts of size bytes to rank 1 and flushes, iters
 * times (rank 0; the others wait at the barrier). */
static double post_puts(int iters, double *s, int first, void *arg)
{
	struct puts_arg *a = arg;
	double t0 = MPI_Wtime();
	if (rank == 0) {
		for (int i = 0; i < iters; i++) {
			double t = MPI_Wtime();
			for (int w = 0; w < a->window; w++)
				MPI_Put(src, a->size, MPI_BYTE, 1, (MPI_Aint)MAX_SIZE, a->size, MPI_BYTE, win);
			MPI_Win_flush(1, win);
			if (s)
				s[first + i] = MPI_Wtime() - t;
		}
	}
	double d = MPI_Wtime() - t0;
	MPI_Barrier(MPI_COMM_WORLD);
	return d;
}

static void bandwidth(const char *test, int size, int window)
{
	struct puts_arg a = {size, window};
	double total;
	int iters = measure(post_puts, &a, 0, NULL, &total);
	if (rank == 0)
		printf("mpi,%s,%d,%d,%d,%d,%.3f\n", test, nranks, size, window, iters,
		       (double)size * window * iters / total / (1 << 20));
}

static void put_flush(void)
{
	struct puts_arg a = {8, 1};
	double total, *s;
	int iters = measure(post_puts, &a, 1, &s, &total);
	if (rank == 0)
		printf("mpi,put_flush,%d,8,1,%d,%.2f\n", nranks, iters, median_us(s, iters));
	free(s);
}

struct coll_arg {
	int allreduce, count;
	double *buf, *out;
};

static double collective(int iters, double *s, int first, void *arg)
{
	struct coll_arg *a = arg;
	double t0 = MPI_Wtime();
	for (int i = 0; i < iters; i++) {
		double t = MPI_Wtime();
		if (a->allreduce)
			MPI_Allreduce(a->buf, a->out, a->count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		else
			MPI_Barrier(MPI_COMM_WORLD);
		if (s)
			s[first + i] = MPI_Wtime() - t;
	}
	return MPI_Wtime() - t0;
}

static void coll(int allreduce, int size)
{
	struct coll_arg a = {allreduce, size / 8, NULL, NULL};
	a.buf = calloc(a.count + 1, sizeof *a.buf);
	a.out = calloc(a.count + 1, sizeof *a.out);
	for (int i = 0; i < a.count; i++)
		a.buf[i] = rank + i % 7;
	double total, *s;
	int iters = measure(collective, &a, 1, &s, &total);
	for (int i = 0; allreduce && i < a.count; i++) {
		double want = (double)nranks * (nranks - 1) / 2 + (double)nranks * (i % 7);
		if (a.out[i] != want) {
			fprintf(stderr, "osc_bench: allreduce element %d is %g, want %g\n", i, a.out[i], want);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
	}
	if (rank == 0) {
		if (allreduce)
			printf("mpi,allreduce,%d,%d,,%d,%.2f\n", nranks, size, iters, median_us(s, iters));
		else
			printf("mpi,barrier,%d,0,,%d,%.2f\n", nranks, iters, median_us(s, iters));
	}
	free(s);
	free(a.buf);
	free(a.out);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (argc > 1) {
		char *end;
		min_time = strtod(argv[1], &end);
		if (*end != '\0' || min_time <= 0 || min_time > 10) {
			if (rank == 0)
				fprintf(stderr, "osc_bench: min_time %s: want seconds in (0, 10], e.g. 0.2\n", argv[1]);
			MPI_Finalize();
			return 2;
		}
	}
	if (nranks < 2) {
		if (rank == 0)
			fprintf(stderr, "osc_bench: needs at least 2 ranks (mpirun -np 2)\n");
		MPI_Finalize();
		return 2;
	}
	char *base;
	MPI_Win_allocate((MPI_Aint)2 * MAX_SIZE, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
	src = malloc(MAX_SIZE);
	memset(src, 0x5a, MAX_SIZE);
	MPI_Win_lock_all(0, win);

	int sizes[] = {1 << 20, 2 << 20, 4 << 20};
	for (int i = 0; i < 3; i++) {
		int w = WINDOW_BYTES / sizes[i];
		bandwidth("put", sizes[i], w > 64 ? 64 : w);
	}
	put_flush();
	bandwidth("rate", 8, 64);
	coll(1, 8);
	coll(0, 0);

	MPI_Win_unlock_all(win);
	MPI_Win_free(&win);
	free(src);
	MPI_Finalize();
	return 0;
}

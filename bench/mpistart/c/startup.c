/* startup: the shape of the K-means job of bench/procscale under Open MPI:
 * MPI_Init, then 20 allreduces of one double. Rank 0 prints "first" once
 * the first allreduce is done (every rank started and joined it) and
 * "done" after the last, so that the driver can time the start-up as
 * procscale times ours (the launcher's start to the first iteration). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
	int rank, i;
	double x, y;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	x = rank;
	for (i = 0; i < 20; i++) {
		MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		if (rank == 0 && i == 0) {
			printf("first\n");
			fflush(stdout);
		}
	}
	if (rank == 0) {
		printf("done %.0f\n", y);
		fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}

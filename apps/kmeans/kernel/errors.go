package kernel

import (
	"errors"
	"fmt"
)

// The sentinels the K-means packages share: the point files
// (apps/kmeans/points) and the distributed job (apps/kmeans) wrap them too.
var (
	// ErrConfig is returned by Config.Validate, NewKernel, Lloyd, the
	// Parse functions and GenConfig.Validate/Generate when a setting is
	// out of range or two settings contradict each other; the point files
	// and the job wrap it for theirs (a bad layout, a K above the number
	// of points, an injection that names no rank). The wrapping error
	// names the values.
	ErrConfig = errors.New("kmeans: invalid configuration")
	// ErrShape is returned by NewKernel, Kernel.Step, Lloyd, Reference, the
	// writers and the helpers when a slice length does not match the stated
	// n, d or k (for example len(points) is not a multiple of d).
	ErrShape = errors.New("kmeans: slice length does not match the shape")
	// ErrNotFinite is returned when a coordinate is NaN or ±Inf: by
	// NewKernel and Kernel.Step (together with ErrShape), by the point
	// file readers (inside a *points.FileError), and by the writers,
	// which refuse to write such values. K-means on such values has no
	// meaning.
	ErrNotFinite = errors.New("kmeans: value is NaN or infinite")
	// ErrRange is returned by Generate and the shard readers when [lo, hi)
	// is inverted or reaches past the end of the data set (and, as
	// points.ErrNoPoints, for a file that holds no points).
	ErrRange = errors.New("kmeans: shard range outside the data set")
	// ErrCount is returned by InitIndices when k > n, and inside a
	// *points.FileError by points.ReadCentroidsCSV when the file does not
	// hold exactly k centroids.
	ErrCount = errors.New("kmeans: wrong number of centroids")
	// ErrClosed is returned by Kernel.Step after Kernel.Close.
	ErrClosed = errors.New("kmeans: kernel closed")
)

func shapeErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrShape}, args...)...)
}

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

package kmeans

import (
	"fmt"

	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
)

// configErr is a setting of the job out of range, or two that contradict
// each other: it wraps kernel.ErrConfig, the K-means packages' one
// sentinel for that.
func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{kernel.ErrConfig}, args...)...)
}

package cli

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestReserved: the container's limit less memoryReserve, a small limit whole, an error
// passed on.
func TestReserved(t *testing.T) {
	of := func(limit uint64, err error) func() (uint64, error) {
		return func() (uint64, error) { return limit, err }
	}
	for name, tc := range map[string]struct {
		limit, want uint64
		err         error
	}{
		"512 MiB":           {limit: 512 << 20, want: 448 << 20},
		"320 MiB":           {limit: 320 << 20, want: 256 << 20},
		"twice the reserve": {limit: 2 * memoryReserve, want: 2 * memoryReserve},
		"an error":          {err: errors.New("no cgroup")},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := reserved(of(tc.limit, tc.err))()
			assert.Equal(t, tc.err, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

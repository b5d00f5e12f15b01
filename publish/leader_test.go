package publish

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// A leader-election setting client-go refuses is an ErrInvalidConfig from New's elector
// (exit code 2), never a publisher that waits for a lead it cannot take.
func TestElectorRefusesWhatClientGoRefuses(t *testing.T) {
	base := LeaderElection{Enabled: true, Namespace: "ops", Name: "lease", Identity: "a",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	tests := []struct {
		name string
		edit func(*LeaderElection)
		ok   bool
	}{
		{"defaults", func(*LeaderElection) {}, true},
		{"renew deadline within the jittered retry period", func(l *LeaderElection) { l.RenewDeadline, l.RetryPeriod = 2*time.Second, 2*time.Second }, false},
		{"lease not longer than the renew deadline", func(l *LeaderElection) { l.LeaseDuration = l.RenewDeadline }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			le := base
			tt.edit(&le)
			e, err := newElector(le, kubefake.NewClientset(), zaptest.NewLogger(t))
			if tt.ok {
				require.NoError(t, err)
				assert.False(t, e.leading.Load(), "not leading before the Lease is held")
				return
			}
			assert.True(t, errors.Is(err, ErrInvalidConfig), "got %v", err)
		})
	}

	e, err := newElector(LeaderElection{}, kubefake.NewClientset(), zaptest.NewLogger(t))
	require.NoError(t, err)
	assert.True(t, e.leading.Load(), "without leader election this replica always leads")
}

package xds

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
)

// A map held because another replica's report does not list it waits for that report;
// when the report stops counting (PeerLeft), the map is named to the pipeline, so it is
// judged again without waiting for an unrelated event.
func TestPeerLeftNamesTheWaitingMaps(t *testing.T) {
	var mu sync.Mutex
	peers := []replicas.Report{{Identity: "pub-c", Clients: 1}}
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true, Peers: func() []replicas.Report {
		mu.Lock()
		defer mu.Unlock()
		return peers
	}}, zaptest.NewLogger(t))
	require.NoError(t, err)
	plan := chatPlan(t, []string{"https://chat.a.example.com", "https://chat.b.example.com"}, true)
	s.Serve(plan)
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := s.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); wait() })

	var c model.Confirmation
	require.Eventually(t, func() bool {
		c, err = s.Apply(ctx, plan, model.Standing{})
		require.NoError(t, err)
		return s.Carries(plan)
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, model.Pending, c.State)
	assert.Contains(t, c.Message, "replica pub-c has not reported on it yet")
	s.Updated() // what the rebuild told

	mu.Lock()
	peers = nil
	mu.Unlock()
	s.Replica().PeerLeft()
	key := types.NamespacedName{Namespace: plan.Namespace, Name: plan.Name}
	assert.Contains(t, s.Updated(), key)
	c, err = s.Apply(ctx, plan, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State, c.Message)
}

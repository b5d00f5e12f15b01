package httproute

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Issue 45, seen with Traefik v3.6.12 in make e2e: Traefik accepts a route generation in its
// status before its proxy serves it. An acceptance counts only once the controller's settle
// has passed since the sink wrote that generation; a route the sink did not write (before a
// restart) or an older generation is not held.
func TestSettleHoldsAcceptanceAfterAWrite(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	now := t0
	s := newSettles()
	s.now = func() time.Time { return now }
	route := func(gen int64) *gwapiv1.HTTPRoute {
		return &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat-global", Generation: gen}}
	}
	assert.Zero(t, s.remaining(route(2), 3*time.Second), "not written by this sink: not held")
	s.wrote(route(2))
	now = t0.Add(time.Second)
	s.wrote(route(2)) // a write that left the generation as it was
	assert.Equal(t, 2*time.Second, s.remaining(route(2), 3*time.Second), "the settle runs from the first write of a generation")
	assert.Zero(t, s.remaining(route(2), 0), "a controller with no settle")
	assert.Zero(t, s.remaining(route(1), 3*time.Second), "another generation than the write")
	now = t0.Add(3 * time.Second)
	assert.Zero(t, s.remaining(route(2), 3*time.Second), "the settle has passed")
	s.forget("prod", "chat-global")
	now = t0
	assert.Zero(t, s.remaining(route(2), 3*time.Second), "forgotten")

	s.after(time.Millisecond, types.NamespacedName{Namespace: "prod", Name: "chat"})
	select {
	case <-s.Updates():
	case <-time.After(10 * time.Second):
		require.Fail(t, "the end of the settle was not signalled")
	}
	sink := &Sink{settles: s}
	assert.Equal(t, []types.NamespacedName{{Namespace: "prod", Name: "chat"}}, sink.Updated())
	assert.Empty(t, sink.Updated(), "handed over once")
}

func TestSettleFor(t *testing.T) {
	traefik := "traefik.io/gateway-controller"
	assert.Equal(t, 3*time.Second, settleFor(SinkConfig{}, traefik), "auto: the table's")
	assert.Zero(t, settleFor(SinkConfig{}, "example.com/gw"), "auto: a controller not listed")
	assert.Zero(t, settleFor(SinkConfig{Settle: -1}, traefik), "none")
	assert.Equal(t, 5*time.Second, settleFor(SinkConfig{Settle: 5 * time.Second}, "example.com/gw"))
}

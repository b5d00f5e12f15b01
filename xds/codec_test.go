package xds

import (
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func TestCodecRoundTripsAndKeepsLargeBuffersBounded(t *testing.T) {
	c := newCodec()
	assert.Equal(t, "proto", c.Name())
	response := func(size int) proto.Message {
		return &discoveryv3.DiscoveryResponse{VersionInfo: "v1",
			Resources: []*anypb.Any{{TypeUrl: "t", Value: []byte(strings.Repeat("x", size))}}}
	}
	for _, tc := range []struct {
		name  string
		msg   proto.Message
		large bool
	}{
		{"ack", response(100), false},
		{"a map's resources", response(8 << 10), false},
		{"at the limit", response(pooledMax - 64), false},
		{"the fleet's route configuration: referenced in place, no buffer", response(6 << 20), false},
		{"another large message", &anypb.Any{TypeUrl: "t", Value: []byte(strings.Repeat("x", 6<<20))}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := c.Marshal(tc.msg)
			require.NoError(t, err)
			got := tc.msg.ProtoReflect().New().Interface()
			require.NoError(t, c.Unmarshal(data, got))
			assert.True(t, proto.Equal(tc.msg, got))
			kept := c.large.bytes
			data.Free() // written: the buffer goes back to its pool
			assert.Equal(t, tc.large, c.large.bytes > kept, "a large message's buffer is kept by the codec's own pool")
		})
	}
	_, err := c.Marshal("not a message")
	assert.Error(t, err)
}

// The codec's pool reuses a kept buffer and never keeps more than keepLarge bytes, however
// many large responses are in flight at once (one per Envoy per drain).
func TestLargePoolKeepsAtMostKeepLarge(t *testing.T) {
	p := &largePool{}
	var inFlight []*[]byte
	for range 3 * keepLarge / (1 << 20) {
		inFlight = append(inFlight, p.Get(1<<20))
	}
	for _, b := range inFlight {
		p.Put(b)
	}
	assert.LessOrEqual(t, p.bytes, keepLarge)
	assert.Equal(t, keepLarge/(1<<20), len(p.free))
	again := p.Get(600 << 10)
	assert.Len(t, *again, 600<<10)
	assert.Equal(t, 1<<20, cap(*again), "a kept buffer large enough is reused")
	assert.Equal(t, keepLarge-(1<<20), p.bytes)
}

// Once no large response was marshalled for its idle time, the pool keeps nothing: a steady
// fleet holds no buffers for drains that do not come.
func TestLargePoolReleasesWhenIdle(t *testing.T) {
	p := &largePool{idle: 20 * time.Millisecond}
	b := p.Get(1 << 20)
	p.Put(b)
	kept := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.bytes + len(p.free)
	}
	require.Eventually(t, func() bool { return kept() == 0 }, 5*time.Second, 5*time.Millisecond)
	again := p.Get(1 << 20)
	assert.Len(t, *again, 1<<20, "the pool still serves after a release")
}
